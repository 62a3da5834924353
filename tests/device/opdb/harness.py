"""Runs PyTorch's operator database (op_db) on simhpu and compares with the CPU.

Each case is one OpInfo, one dtype and one way of calling it: `forward`, `inplace`
(the in-place variant on a strided view), `out` (the out= variant) and `grad`
(gradients of the inputs). The CPU result is the reference; a case the CPU itself
rejects is not a case. Random operators (an ATen operator they run is tagged
nondeterministic_seeded) are compared by shape and dtype only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils._python_dispatch import TorchDispatchMode

DEVICE = "simhpu"
DTYPES = (torch.float32, torch.int64, torch.bfloat16)
MODES = ("forward", "inplace", "out", "grad")

# Ops whose results cannot be compared with the CPU's, and why.
NOT_COMPARABLE = {
    "to": "its samples name the CPU device as the destination",
    "empty": "uninitialised memory", "empty_like": "uninitialised memory", "new_empty": "uninitialised memory",
    "empty_strided": "uninitialised memory", "new_empty_strided": "uninitialised memory",
    "empty_permuted": "uninitialised memory",
}
# Forward results laid out otherwise than the CPU lays them out, and why.
LAYOUT_DIFFERENCES = {
    "fft.rfftn": "the device takes the layout PyTorch's meta kernel gives; the CPU's pocketfft "
                 "returns a contiguous tensor",
    "linalg.eig": "the CPU's LAPACK returns column-major eigenvectors; the device, as the meta kernel, row-major",
}

# (op name, variant, mode): why the device differs from the CPU there.
KNOWN_DIFFERENCES = {
    ("addr", "", "inplace"): "addr_ on a 0-dim self: the CPU refuses (2D tensor expected); on simhpu the "
                             "composite addr_ reaches addr.out, whose CPU kernel resizes self instead. The CPU "
                             "kernel refuses only when out and self are the same C++ reference, which the "
                             "composite's unboxed call gives and any boxed call (the reference path) cannot",
}
SAMPLES_PER_CASE = 3


class SamplesUnavailable(Exception):
    """op_db cannot make this case's samples even for the CPU: nothing to compare."""


@dataclass
class Outcome:
    status: str  # "pass", "fail", "skip"
    detail: str = ""


def to_device(x):
    return tree_map(lambda t: t.detach().to(DEVICE).requires_grad_(t.requires_grad)
                    if isinstance(t, torch.Tensor) and t.device.type == "cpu" else t, x)


def call(fn, sample, device_sample=None):
    s = sample if device_sample is None else device_sample
    return fn(s.input, *s.args, **s.kwargs)


def device_copy(sample):
    moved = sample.transform(lambda t: t.detach().to(DEVICE).requires_grad_(t.requires_grad)
                             if isinstance(t, torch.Tensor) else t)
    if "device" in moved.kwargs:  # factory functions
        moved.kwargs = {**moved.kwargs, "device": DEVICE}
    return moved


def paired_samples(op, dtype, requires_grad):
    """The op's samples made for the CPU and, with the same seed, for the device.

    Samples made for a device keep on the CPU what the op wants there (index lists,
    sizes given as tensors). The device sample takes the CPU sample's values, so both
    runs see the same numbers; where the two differ in structure, the CPU sample is
    moved instead.
    """
    try:
        torch.manual_seed(0)
        cpu = list(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))[:SAMPLES_PER_CASE]
    except Exception as e:  # noqa: BLE001 - the op database itself fails on the CPU
        raise SamplesUnavailable(f"op_db's sample_inputs fails on the CPU: {type(e).__name__}: {e}") from e
    torch.manual_seed(0)
    torch.simhpu.manual_seed(0)
    device = list(op.sample_inputs(DEVICE, dtype, requires_grad=requires_grad))[:SAMPLES_PER_CASE]
    pairs = []
    for c, d in zip(cpu, device):
        c_leaves, c_spec = tree_flatten((c.input, c.args, c.kwargs))
        d_leaves, d_spec = tree_flatten((d.input, d.args, d.kwargs))
        if c_spec != d_spec or not all(_same_kind(a, b) for a, b in zip(c_leaves, d_leaves)):
            pairs.append((c, device_copy(c)))
            continue
        with torch.no_grad():
            for a, b in zip(c_leaves, d_leaves):
                if isinstance(a, torch.Tensor) and a.layout == torch.strided:
                    _base_of(b).copy_(_base_of(a))
        pairs.append((c, d))
    return pairs


def _same_kind(a, b):
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return False
    if not isinstance(a, torch.Tensor):
        try:
            return bool(a == b)  # sizes and options drawn at random must agree too
        except Exception:  # noqa: BLE001 - values that do not compare
            return type(a) is type(b)
    if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
        return False
    if a.layout != torch.strided:
        return False  # sparse samples are moved from the CPU, indices and all
    return (a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
            and _base_of(a).shape == _base_of(b).shape)


def _layout(strides, shape):
    """The strides that place elements (a dimension of size 1 may have any)."""
    return tuple(st for st, n in zip(strides, shape) if n > 1)


def _base_of(t):
    return t if t._base is None else t._base


def tolerance(op, dtype):
    # bfloat16 results go through reductions and transcendental functions whose
    # CPU kernels may take another order on aliases of other strides.
    if dtype == torch.bfloat16:
        return dict(atol=1e-2, rtol=1.6e-2)
    if dtype == torch.float32:
        return dict(atol=1e-5, rtol=1.3e-5)
    return {}


def compare(expected, actual, *, shapes_only=False, check_layout=False, device=DEVICE, **tol):
    """`actual` (on `device`) against `expected` (on the CPU); with `check_layout`, the results'
    strides too (a program sees them: the next kernel reads that layout, .view() may refuse it)."""
    exp_leaves, exp_spec = tree_flatten(expected)
    act_leaves, act_spec = tree_flatten(actual)
    assert len(exp_leaves) == len(act_leaves), f"{len(act_leaves)} results, expected {len(exp_leaves)}"
    for e, a in zip(exp_leaves, act_leaves):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"got {type(a).__name__}, expected a tensor"
            assert a.device.type == device, f"result on {a.device}, expected {device}"
            device_stride = a.stride() if a.layout == torch.strided else None
            a = a.cpu()
            assert a.dtype == e.dtype, f"dtype {a.dtype}, expected {e.dtype}"
            assert a.shape == e.shape, f"shape {tuple(a.shape)}, expected {tuple(e.shape)}"
            if not shapes_only:
                torch.testing.assert_close(a, e, equal_nan=True, check_stride=False, **tol)
            if check_layout and e.layout == torch.strided:
                assert _layout(device_stride, e.shape) == _layout(e.stride(), e.shape), (
                    f"laid out with strides {device_stride}, expected {e.stride()} (shape {tuple(e.shape)})")
        elif isinstance(e, float) and isinstance(a, float) and not shapes_only:
            assert (math.isnan(e) and math.isnan(a)) or math.isclose(e, a, rel_tol=1e-4, abs_tol=1e-5), f"{a} != {e}"
        elif not shapes_only and not isinstance(e, (torch.dtype, torch.device)):
            assert e == a, f"{a!r} != {e!r}"


class _SeededOps(TorchDispatchMode):
    """Notes whether any ATen operator run under it draws random numbers."""

    def __init__(self):
        super().__init__()
        self.random = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.random = self.random or torch.Tag.nondeterministic_seeded in func.tags
        return func(*args, **(kwargs or {}))


def is_random(run, sample):
    """The op draws random numbers: an ATen operator it runs is tagged
    nondeterministic_seeded. (Two seeds are not a test: OpInfos of random ops
    seed the generator themselves, and the device's generator is not the CPU's.)"""
    with _SeededOps() as seen:
        run()
    return seen.random


def strided_copy(t):
    """`t`'s values in a view with every other element of a larger buffer."""
    if t.dim() == 0:
        return t.clone()
    base = torch.zeros(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype, device=t.device)
    view = base[..., ::2]
    view.copy_(t)
    return view


def run_case(op, dtype, mode) -> list[Outcome]:
    if dtype not in op.supported_dtypes("cpu"):
        return [Outcome("skip", "dtype not supported on CPU")]
    requires_grad = mode == "grad"
    if requires_grad and not (op.supports_autograd and dtype.is_floating_point):
        return [Outcome("skip", "no autograd")]
    if mode == "inplace" and op.inplace_variant is None:
        return [Outcome("skip", "no in-place variant")]
    if mode == "out" and not op.supports_out:
        return [Outcome("skip", "no out= variant")]
    if op.name in NOT_COMPARABLE:
        return [Outcome("skip", NOT_COMPARABLE[op.name])]
    try:
        pairs = paired_samples(op, dtype, requires_grad)
    except SamplesUnavailable as e:
        return [Outcome("skip", str(e))]
    except Exception as e:  # noqa: BLE001 - the samples made for the device, or their pairing, failed
        return [Outcome("fail", f"making the device's samples: {type(e).__name__}: {e}")]
    return [run_sample(op, cpu_sample, device_sample, mode) for cpu_sample, device_sample in pairs]


def run_sample(op, sample, device_sample, mode) -> Outcome:
    runner = {"forward": forward, "inplace": inplace, "out": out_variant, "grad": grad}[mode]
    # The CPU result first. A sample the CPU rejects, the device must reject too,
    # with an exception of the same type, and stay usable.
    try:
        torch.manual_seed(0)
        expected = runner(op, sample, None)
    except Exception as cpu_error:  # noqa: BLE001
        return rejected_alike(op, sample, device_sample, runner, cpu_error)
    random = is_random(lambda *a, **k: runner(op, sample, None), sample)
    try:
        torch.manual_seed(0)
        actual = runner(op, sample, device_sample)
        compare(expected, actual, shapes_only=random, check_layout=mode == "forward" and op.name not in LAYOUT_DIFFERENCES,
                **tolerance(op, sample_dtype(sample)))
        torch.simhpu.synchronize()
        return Outcome("pass")
    except Exception as e:  # noqa: BLE001
        try:
            torch.simhpu.synchronize()
        except Exception:  # noqa: BLE001 - the failure is reported already
            pass
        return Outcome("fail", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")


def rejected_alike(op, sample, device_sample, runner, cpu_error) -> Outcome:
    try:
        runner(op, sample, device_sample)
        torch.simhpu.synchronize()
    except Exception as device_error:  # noqa: BLE001
        try:
            torch.simhpu.synchronize()
        except Exception:  # noqa: BLE001 - a kernel failed on the device: rejected, asynchronously
            return Outcome("pass", "rejected alike (asynchronously)")
        if not isinstance(device_error, type(cpu_error)):
            return Outcome("fail", f"the CPU raises {type(cpu_error).__name__}, the device "
                                   f"{type(device_error).__name__}: {str(device_error).splitlines()[0][:200]}")
        return Outcome("pass", "rejected alike")
    return Outcome("fail", f"the CPU raises {type(cpu_error).__name__} ({str(cpu_error).splitlines()[0][:150]}), "
                           "the device accepts it")


def sample_dtype(sample):
    leaves = [t for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0] if isinstance(t, torch.Tensor)]
    return leaves[0].dtype if leaves else None


def forward(op, sample, device_sample):
    return call(op, sample, device_sample)


def inplace(op, sample, device_sample):
    s = sample if device_sample is None else device_sample
    target = strided_copy(s.input)
    base = target._base
    result = op.inplace_variant(target, *s.args, **s.kwargs)
    return target, result, base, list(target.stride())


def out_variant(op, sample, device_sample):
    expected = call(op, sample)
    device = DEVICE if device_sample is not None else "cpu"
    out = tree_map(lambda t: torch.empty(0, dtype=t.dtype, device=device) if isinstance(t, torch.Tensor) else t,
                   expected)
    s = sample if device_sample is None else device_sample
    result = op(s.input, *s.args, **s.kwargs, out=out)
    return out, result


def grad(op, sample, device_sample):
    s = sample if device_sample is None else device_sample
    inputs = [t for t in tree_flatten((s.input, s.args, s.kwargs))[0]
              if isinstance(t, torch.Tensor) and t.requires_grad]
    outputs = [t for t in tree_flatten(call(op, sample, device_sample))[0]
               if isinstance(t, torch.Tensor) and t.requires_grad]
    if not inputs or not outputs:
        return []
    # A fixed weighting of every output: any wrong gradient element shows.
    total = sum((o * torch.linspace(0.5, 1.5, o.numel(), dtype=o.dtype, device=o.device).view(o.shape)).sum()
                for o in outputs if o.is_floating_point() or o.is_complex())
    return list(torch.autograd.grad(total, inputs, allow_unused=True))
