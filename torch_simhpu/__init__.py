"""torch_simhpu: a simulated accelerator for PyTorch, device type "simhpu".

Importing the package registers the device with PyTorch (PrivateUse1 renamed to
"simhpu", the torch.simhpu module, Tensor.simhpu() and friends; "npu" for code written
against torch_npu, torch_simhpu._device_name) and exposes the
operators declared in op_plugin_functions.yaml as torch_simhpu.npu_*.
"""


def _autoload() -> None:
    """The `torch.backends` entry point: importing this package has registered the device."""


import sys as _sys  # noqa: E402

# Whether this package is imported before torch: then no backward can have run before the device
# is registered (_device_registration._check_autograd_engine need not find out).
_imported_before_torch = "torch" not in _sys.modules

# Defined before `import torch`: when this package is imported first, torch's
# import loads its backends, this entry point among them, while this module is
# still being initialised.
import torch  # noqa: E402

import glob as _glob  # noqa: E402
import importlib.metadata  # noqa: E402
import os as _os  # noqa: E402

if not _glob.glob(_os.path.join(_os.path.dirname(__file__), "_C*.so")):
    # The source tree (a folder holding torch_simhpu/ without its built module)
    # is first on sys.path: Python was started in the repository's root.
    raise ImportError(
        f"torch_simhpu is being imported from {_os.path.dirname(__file__)}, the source folder, not from the "
        f"installed wheel: Python was started in {_os.getcwd()}, which puts that folder first on sys.path. "
        "Run Python from another folder (or `cd` out of the repository) to use the installed torch_simhpu.")

# The release and, as a local label, the hash of the sources it was built from.
__version__ = importlib.metadata.version("torch_simhpu")

from torch_simhpu import _device_name  # noqa: E402,F401  (first: the device's name is chosen as torch is imported)
from torch_simhpu import _C  # noqa: E402
from torch_simhpu import _device_registration
from torch_simhpu import device
from torch_simhpu import library  # noqa: F401  (torch_simhpu.library.register_user_custom_op)
from torch_simhpu.collect_env import collect_env  # noqa: E402,F401  (python -m torch_simhpu)
from torch_simhpu.op_plugin import load_op_plugin, op_plugin_kernels  # noqa: F401  (op-plugin's own YAML)
from torch_simhpu.device import current_device, device_count, is_available, set_device, synchronize

_device_registration.register(backward_may_have_run=not _imported_before_torch)

from torch_simhpu._after_import import after_import  # noqa: E402


def _register_graph_mode() -> None:
    """The device with Dynamo and Inductor, once torch._dynamo is imported (torch.compile imports it):
    importing them with torch_simhpu would cost every `import torch` a second."""
    from torch_simhpu import _inductor

    _inductor.register()


after_import("torch._dynamo", _register_graph_mode)

from torch_simhpu import _pytorch_gaps  # noqa: E402

_pytorch_gaps.install()

from torch_simhpu import _triton  # noqa: E402

_triton.interpret_where_no_gpu()

from torch_simhpu import distributed  # noqa: E402

distributed.register()

from torch_simhpu._generated import compile as _compile  # noqa: E402
from torch_simhpu._generated import fake as _fake  # noqa: E402,F401
from torch_simhpu._generated import PYTHON_FUNCTIONS as _PYTHON_FUNCTIONS  # noqa: E402

for _name in _PYTHON_FUNCTIONS:
    globals()[_name] = getattr(_C, _name)
after_import("torch._dynamo", lambda: _compile.register(_C))  # what Dynamo traces the bindings as

# A wheel built from op-plugin's own YAML (docs/yaml.md): its custom operators'
# names, and their fake kernels from the gen_opapi rules.
from torch_simhpu._generated import op_plugin as _op_plugin_ops  # noqa: E402

_OP_PLUGIN_FUNCTIONS = tuple(n for n in _op_plugin_ops.FUNCTIONS if n not in globals())
for _name in _OP_PLUGIN_FUNCTIONS:
    globals()[_name] = getattr(torch.ops.npu, _name)
if _op_plugin_ops.FAKE_RULES:
    _op_plugin_library = torch.library.Library("npu", "FRAGMENT")
    _op_plugin_ops.register(_op_plugin_library)




__all__ = ["device", "is_available", "device_count", "current_device", "set_device", "synchronize",
           "load_op_plugin", "op_plugin_kernels", "collect_env", *_PYTHON_FUNCTIONS, *_OP_PLUGIN_FUNCTIONS]
