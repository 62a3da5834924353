"""torch_npu's Python face on simhpu: code written for Ascend NPUs runs on the simulated device.

    import torch
    import torch_npu
    x = torch.randn(4, 8).npu()                    # the device is "npu" in this process
    y, rstd = torch_npu.npu_rms_norm(x, torch.ones(8).npu())
    torch.npu.synchronize()

What it is: simhpu (torch_simhpu, the wheel) registers the device; this package names it "npu"
(torch_simhpu._device_name says when a process's device gets that name), makes torch.npu the
device module with torch_npu's additions (torch_npu.npu), keeps Ascend's internal formats as a
tensor's format (torch_npu.formats), and serves torch_npu.npu_* from the operators simhpu has:
its own YAML's, and op-plugin's when a wheel is built from op-plugin's YAML or
SIMHPU_OP_PLUGIN_YAML names the file to load. An operator with no simulated kernel raises
NotImplementedError naming its entry.
"""
from __future__ import annotations

import os
import sys

_SETTING = "SIMHPU_DEVICE_NAME"


def _device_name_is_free() -> bool:
    """Whether no device has been named in this process yet (torch not imported, or autoload off)."""
    torch = sys.modules.get("torch")
    return torch is None or torch._C._get_privateuse1_backend_name() == "privateuseone"


if _device_name_is_free():
    os.environ.setdefault(_SETTING, "npu")

import torch  # noqa: E402
import torch_simhpu  # noqa: E402  (registers the device when autoload is off)

# Active where the device is named "npu". Elsewhere the package imports and stays out of the way:
# libraries probe for an NPU by importing torch_npu (transformers' is_torch_npu_available), and a
# probe must not break a program whose device is simhpu. There torch.npu does not exist and any
# torch_npu.NAME says how to make the process an npu one.
ACTIVE = torch._C._get_privateuse1_backend_name() == "npu"
_INACTIVE = (f"torch_npu is inactive in this process: its device is already named "
             f"{torch._C._get_privateuse1_backend_name()!r}, and PyTorch names a device once per process. Import "
             "torch_npu in the file that first imports torch (the usual `import torch` / `import torch_npu` "
             f"pair), or before torch, or set {_SETTING}=npu")
__version__ = "2.13.0+simhpu"

if ACTIVE:
    from torch_npu import _C  # noqa: F401  (torch_npu._C._npu_getOption, as programs call it)
    from torch_npu.memory import copy_memory_  # noqa: F401
    from torch_npu.rms_norm import npu_add_rms_norm, npu_rms_norm  # noqa: F401  (Ascend's dtypes and keyword)
    from torch_npu import formats as _formats
    from torch_npu import npu
    from torch_npu.formats import Format, get_npu_format, npu_format_cast, npu_format_cast_  # noqa: F401

    torch.npu = npu
    sys.modules["torch.npu"] = npu
    _formats.install_tensor_methods()
    # An Ascend part computes half and bfloat16 operators at float32 and rounds once, and has them
    # where the CPU has no reduced-precision kernel (avg_pool3d, cdist): simhpu does so for this process.
    torch_simhpu._C._set_reduced_precision_in_float32(True)
    # Its loss kernels take int32 class targets (nll_loss, multilabel_margin_loss), which the CPU's refuse.
    torch_simhpu._C._set_int32_targets(True)
    # And some of op-plugin's own ATen kernels take more than the CPU's (one_hot of int32).
    from torch_npu import ascend_aten as _ascend_aten

    _ascend_aten.register()

    from torch_npu import references as _references
    from torch_simhpu import op_plugin_references as _op_plugin_references

    # op-plugin's custom operators that have a simulated kernel: each one's reference (references.yaml).
    REFERENCES = os.path.join(os.path.dirname(__file__), "references.yaml")
    _HELPERS = {"ref": _references}
    if os.environ.get("SIMHPU_OP_PLUGIN_YAML"):
        # And every other custom operator of op-plugin's YAML by name (torch.ops.npu.*), as a wheel built
        # from that YAML has them: calling one without a kernel raises NotImplementedError naming its entry.
        torch_simhpu.load_op_plugin(os.environ["SIMHPU_OP_PLUGIN_YAML"], references=REFERENCES, helpers=_HELPERS)
    else:
        _op_plugin_references.load_references(REFERENCES, helpers=_HELPERS)


def __getattr__(name: str):
    """torch_npu.npu_*: simhpu's binding of the operator where it has one, else torch.ops.npu's."""
    if not ACTIVE and not name.startswith("__"):
        raise AttributeError(f"torch_npu.{name}: {_INACTIVE}")
    if name.startswith("_") and not name.startswith("_npu"):
        raise AttributeError(f"module 'torch_npu' has no attribute {name!r}")
    binding = torch_simhpu.__dict__.get(name)
    if binding is not None and hasattr(torch.ops.npu, name):
        return binding
    try:
        return _with_out_tuple(getattr(torch.ops.npu, name))
    except AttributeError:
        raise AttributeError(
            f"module 'torch_npu' has no attribute {name!r}: no operator npu::{name} is declared here (simhpu's "
            "YAML, or op-plugin's when SIMHPU_OP_PLUGIN_YAML names it or the wheel was built from it)") from None


def _with_out_tuple(packet):
    """The operator as torch_npu's bindings call it: `out=` takes a tuple for an `.out` overload whose
    outputs have names of their own (npu_apply_adam(..., out=(var, m, v)))."""
    overload = getattr(packet, "out", None) if "out" in packet.overloads() else None
    names = [a.name for a in overload._schema.arguments if a.is_out] if overload is not None else []
    if not names or names == ["out"]:
        return packet  # torch.ops takes out= for these as it is

    def call(*args, out=None, **kwargs):
        if out is None:
            return packet(*args, **kwargs)
        outputs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
        if len(outputs) != len(names):
            raise TypeError(f"torch_npu.{packet.__name__}: out= takes {len(names)} tensors "
                            f"({', '.join(names)}), got {len(outputs)}")
        return overload(*args, **kwargs, **dict(zip(names, outputs)))

    call.__name__ = call.__qualname__ = packet.__name__
    return call
