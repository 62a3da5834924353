from torch_npu.contrib.module import npu_modules  # noqa: F401
from torch_npu.contrib.module.drop_path import NpuDropPath  # noqa: F401
from torch_npu.contrib.module.npu_modules import DropoutWithByteMask  # noqa: F401
