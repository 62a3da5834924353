"""torch_npu._C: the functions of torch_npu's extension module that Python code calls by name."""
from __future__ import annotations

from torch_npu import npu as _npu

_ENABLED = (True, b"enable", "enable")


def _npu_getOption(name: str) -> bytes | None:
    """An ACL option's value as bytes: ALLOW_INTERNAL_FORMAT's is b"enable" or b"disable", as
    torch.npu.config.allow_internal_format says (programs write back what they read, bytes and all);
    any other's is what set_option gave it, or None."""
    if name == "ALLOW_INTERNAL_FORMAT":
        return b"enable" if _npu.config.allow_internal_format in _ENABLED else b"disable"
    value = _npu._options.get(name)
    return None if value is None else value.encode()


def _npu_setOption(option: dict) -> None:
    _npu.set_option(option)
