"""Test machinery for operator authors: torch.library.opcheck for device
inputs (opcheck.py), and the tests codegen generates from an entry's
`reference:` (reference_tests.py)."""
from .opcheck import DEVICE_UTILS, opcheck

__all__ = ["DEVICE_UTILS", "opcheck"]
