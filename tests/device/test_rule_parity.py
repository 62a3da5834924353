"""The device adapter and the fake kernel (torch.compile, FakeTensorMode) judge
the same call the same way: the same output shapes and dtypes for good
arguments, the same exception and message for bad ones. Both are generated
from one YAML entry; this runs every custom device op through both."""
import pytest
import torch
import torch_simhpu._generated
from torch._subclasses.fake_tensor import FakeTensorMode

import torch_simhpu  # noqa: F401

D, D1 = "simhpu:0", "simhpu:1"


def t(*shape, dtype=torch.float32, device=D):
    return torch.randn(*shape).to(dtype).to(device)


def idx(*values, device=D):
    return torch.tensor(values, dtype=torch.int64, device=device)


# (op, args builder, expected refusal): a good call (None), or a bad one each rule
# refuses, with the exception type and a part of its message the device must give.
CASES = [
    ("npu_add_custom", lambda: (t(3, 4), t(4)), None),
    ("npu_add_custom", lambda: (t(3, 4), t(5)), (ValueError, "cannot broadcast argument 'y'")),                       # broadcast
    ("npu_add_custom", lambda: (t(3, 4), t(4, dtype=torch.float64)), (TypeError, "to have the dtype of 'x'")),  # same dtype
    ("npu_add_custom", lambda: (t(3, 4, dtype=torch.int64), t(4, dtype=torch.int64)), (TypeError, "dtype Long, which is not supported")),  # supported dtypes
    ("npu_add_custom", lambda: (t(3, 4), t(4, device="cpu")), (RuntimeError, "expected argument 'y' on a simhpu device")),        # device
    ("npu_add_custom", lambda: (t(3, 4), t(4, device=D1)), (RuntimeError, "expected all tensors on one device")),           # one device
    ("npu_scaled_add", lambda: (t(2, 3), t(2, 3), 2.0), None),
    ("npu_swish", lambda: (t(2, 5), 0.5), None),
    ("npu_rms_norm", lambda: (t(4, 8), t(8), 1e-5), None),
    ("npu_rms_norm", lambda: (t(4, 8), t(7), 1e-5), (ValueError, "expected 'gamma' to be 1-D")),                  # last_dim
    ("npu_rms_norm_backward", lambda: (t(4, 8), t(4, 8), t(8), t(4, 1)), None),
    ("npu_rms_norm_backward", lambda: (t(4, 8), t(4, 8), t(8), t(4, 2)), (ValueError, "expected 'rstd' to have shape [4, 1]")),  # row_stat
    ("npu_rms_norm_backward", lambda: (t(4, 7), t(4, 8), t(8), t(4, 1)), (ValueError, "to have the same shape")),  # same_shape
    ("npu_sum_dims", lambda: (t(2, 3, 4), [0, -1], True), None),
    ("npu_sum_dims", lambda: (t(2, 3, 4), [3], False), (IndexError, "dimension 3 is out of range")),                # reduce: out of range
    ("npu_sum_dims", lambda: (t(2, 3, 4), [1, 1], False), (ValueError, "dimension 1 appears more than once")),             # reduce: twice
    ("npu_mul_add", lambda: (t(2, 3), t(3), t(2, 1)), None),
    ("npu_weighted_sum", lambda: (t(3), [t(3), t(3)]), None),
    ("npu_weighted_sum", lambda: (t(3), [t(3), t(4)]), (ValueError, "'others[1]' to have the same shape")),                # same_shape against a list
    ("npu_weighted_sum", lambda: (t(3), [t(3)], {"reduction": "bogus"}), (ValueError, "expected one of 'sum', 'mean', 'max'")),  # one_of (a trailing dict: keywords)
    ("npu_softplus_beta", lambda: (t(5), 2.0, 10.0), None),
    ("npu_lerp_scalar", lambda: (t(2, 3), t(3, dtype=torch.float64), 0.5), None),  # promote
    ("npu_lerp_scalar", lambda: (t(2, 3), t(3, dtype=torch.int64), 0.5), None),
    ("npu_lerp_scalar", lambda: (t(2, 3, dtype=torch.int64), t(3, dtype=torch.int64), 0.5), (TypeError, "promote to dtype Long, which is not supported")),  # promoted dtype
    ("npu_broadcast_to", lambda: (t(3, 1), [2, 3, 4]), None),
    ("npu_broadcast_to", lambda: (t(3, 2), [2, 3, 4]), (ValueError, "does not broadcast to the output shape")),                # broadcastable
    ("npu_add_rms_norm", lambda: (t(2, 8), t(2, 8), t(8)), None),
    ("npu_add_rms_norm", lambda: (t(2, 8), t(2, 4), t(8)), (ValueError, "'x' and 'residual' to have the same shape")),
]


def outcome(fn):
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return type(e).__name__, str(e).split("\n")[0]
    results = result if isinstance(result, tuple) else (result,)
    return [(tuple(r.shape), r.dtype, r.device.type) for r in results]


def test_every_custom_device_op_has_a_case():
    covered = {op for op, _, _ in CASES}
    # The backend's own: operator packages may add to the npu namespace too (examples/my_add).
    declared = set(torch_simhpu._generated.CUSTOM_OPS)
    composites = {"npu_rms_norm_scaled", "npu_add_custom_v0"}  # no fake kernel: they decompose
    assert declared - composites <= covered, declared - composites - covered


@pytest.mark.parametrize("op,make,refusal", CASES, ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(CASES)])
def test_adapter_and_fake_kernel_agree(op, make, refusal):
    args = make()
    kwargs = args[-1] if isinstance(args[-1], dict) else {}
    args = args[:-1] if kwargs else args
    on_device = outcome(lambda: getattr(torch.ops.npu, op)(*args, **kwargs))
    if refusal is None:
        assert isinstance(on_device, list), f"{op} refused a good call: {on_device}"
    else:
        error, fragment = refusal
        assert isinstance(on_device, tuple), f"{op} accepted a call its rule must refuse ({fragment})"
        assert on_device[0] == error.__name__ and f"{op}: " in on_device[1] and fragment in on_device[1], on_device
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else
                     [mode.from_tensor(x) for x in a] if isinstance(a, list) and a and isinstance(a[0], torch.Tensor)
                     else a for a in args]
        faked = outcome(lambda: getattr(torch.ops.npu, op)(*fake_args, **kwargs))
    assert faked == on_device
