"""torch_npu.contrib: the modules and functions Ascend ships beside the operators, written over them."""
from torch_npu.contrib import function, module  # noqa: F401
