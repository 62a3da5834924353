"""The tests an operator's `reference:` generates.

Codegen writes each custom entry with a `reference:` into its package's
`_generated/reference.py` as a ReferenceOp: the reference (a Python expression
over the arguments, in torch), the declared dtypes, variants, checks and output
rules, and any `samples:` hints. This module makes sample inputs from those
(the checks' shape relations, broadcasting, non-contiguous and zero-size
tensors, non-default keywords) and runs, per operator:

- forward: the device op against the reference, computed in float64 on the CPU, in every declared dtype;
- out= and in-place variants, where declared;
- gradcheck of the derivative, and agreement of its gradients with autograd through the reference;
- torch.library.opcheck, and torch.compile(fullgraph=True) against eager;
- a dtype the entry does not declare, and each declared check, refused with a message naming the op.

ReferenceOp.opinfo() gives the same operator as one of PyTorch's OpInfos.

`python -m codegen test [OP ...]` (in a package: `python -m torch_simhpu.codegen test`) runs them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch_simhpu._device_name import DEVICE_TYPE

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16, "int32": torch.int32,
          "int64": torch.int64, "bool": torch.bool}
# (rtol, atol) of the device result against the float64 reference cast to the dtype.
TOLERANCES = {torch.float64: (1e-7, 1e-7), torch.float32: (1e-5, 1e-5), torch.float16: (5e-3, 5e-3),
              torch.bfloat16: (3e-2, 3e-2)}
BASE_SHAPE = (4, 6)
DEVICE = DEVICE_TYPE
CHECKS = ("forward", "variants", "gradcheck", "autograd", "opcheck", "compile", "refused_dtype", "declared_checks")


@dataclass(frozen=True)
class Arg:
    name: str
    type: str  # as in the schema: "Tensor", "float", "int[1]", ...
    default: object
    required: bool


@dataclass(frozen=True)
class ReferenceOp:
    name: str
    namespace: str
    where: str  # "op_plugin_functions.yaml:73"
    args: tuple
    reference: Callable
    outputs: tuple
    dtypes: tuple
    variants: tuple = ()
    differentiable: bool = False
    checks: tuple = ()  # (rule, (argument or literal, ...))
    sizes: tuple = ()  # per output: (rule, (...)) of its size
    samples: tuple = ()  # {argument: shape or value} hints from the YAML
    composite: bool = False  # built from other ops: they check its arguments

    @property
    def packet(self):
        return getattr(getattr(torch.ops, self.namespace), self.name)

    def arg(self, name: str) -> Arg:
        return next(a for a in self.args if a.name == name)

    def opinfo(self):
        """The operator as one of PyTorch's OpInfos (torch.testing._internal.opinfo), so
        PyTorch's own test machinery can run it too: op, ref, dtypes, variants, and
        sample inputs made as the generated tests make them."""
        from torch.testing._internal.opinfo.core import OpInfo, SampleInput

        tensor_names = [a.name for a in self.args if _is_tensor(a)]
        first = tensor_names[0]

        def sample_inputs(opinfo, device, dtype, requires_grad, **kwargs):
            for sample in samples(self):
                values = sample.converted(lambda t: t.to(dtype).to(device).requires_grad_(
                    requires_grad and dtype.is_floating_point))
                rest = {k: v for k, v in values.items() if k != first}
                yield SampleInput(values[first], kwargs=rest, name=sample.label)

        return OpInfo(
            self.name, op=lambda *args, **kwargs: self.packet(*args, **kwargs),
            ref=lambda *args, **kwargs: self.reference(**dict(zip([a.name for a in self.args], args)), **kwargs),
            dtypes=tuple(DTYPES[d] for d in self.dtypes), sample_inputs_func=sample_inputs,
            supports_out="out" in self.variants, supports_autograd=self.differentiable,
            inplace_variant=(getattr(getattr(torch.ops, self.namespace), self.name + "_")
                             if "inplace" in self.variants else None))


@dataclass
class Sample:
    label: str
    values: dict  # argument -> CPU float64 tensor (or list of them), or a value
    positive: set = field(default_factory=set)  # tensors that must be positive

    def converted(self, fn) -> dict:
        return {k: ([fn(t) for t in v] if isinstance(v, list) and v and isinstance(v[0], torch.Tensor)
                    else fn(v) if isinstance(v, torch.Tensor) else v) for k, v in self.values.items()}


# Samples ---------------------------------------------------------------------------------------------------------

def _is_tensor(arg: Arg) -> bool:
    return arg.type.rstrip("?") == "Tensor"


def _shapes(op: ReferenceOp, base: tuple, hint: dict | None = None) -> tuple[dict, set]:
    """Each tensor argument's shape (and which must be positive) from the checks' relations."""
    shapes = {a.name: tuple(base) for a in op.args if _is_tensor(a) or a.type == "Tensor[]"}
    positive = set()
    for rule, names in op.checks:
        if rule == "last_dim" or rule == "trailing_shape" or rule == "broadcasts_to":
            outer, inner = (names[1], names[0]) if rule == "broadcasts_to" else names
            shapes[inner] = tuple(shapes[outer][-1:])
        elif rule == "row_stat":
            stat, x = names
            shapes[stat] = tuple(shapes[x][:-1]) + (1,)
            positive.add(stat)
    for name, value in (hint or {}).items():
        if name in shapes:
            shapes[name] = tuple(value)
    return shapes, positive


def _value(arg: Arg, op: ReferenceOp, changed: bool):
    """A non-tensor argument's value: its default, or (changed) another."""
    for rule, names in op.checks:
        if rule == "one_of" and names[0] == arg.name:
            return names[1][-1] if changed else names[1][0]
    base = arg.type.rstrip("?")
    if not arg.required and not changed:
        return arg.default
    if base in ("float",):
        return 0.75 if changed else 0.5
    if base in ("Scalar",):
        return -1.5 if changed else 2
    if base in ("int", "SymInt"):
        return 2 if changed else 1
    if base == "bool":
        return not arg.default if isinstance(arg.default, bool) else True
    if base.startswith(("int[", "SymInt[")):
        return [1] if not changed else [0]
    return arg.default


def _tensors(shapes: dict, op: ReferenceOp, generator: torch.Generator, positive: set, contiguous: bool) -> dict:
    values = {}
    for a in op.args:
        if a.name not in shapes:
            continue
        if a.type.endswith("?") and a.type.rstrip("?") == "Tensor":
            values[a.name] = None
            continue

        def make(shape):
            t = torch.randn(shape, dtype=torch.float64, generator=generator)
            if a.name in positive:
                t = t.abs() + 0.5
            if not contiguous and len(shape) >= 2:
                t = t.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, transposed strides
            return t
        values[a.name] = [make(shapes[a.name]), make(shapes[a.name])] if a.type == "Tensor[]" else make(shapes[a.name])
    return values


def samples(op: ReferenceOp) -> list[Sample]:
    generator = torch.Generator().manual_seed(0)
    hints = list(op.samples) or [None]
    out = []
    for index, hint in enumerate(hints):
        tag = f"sample {index + 1}" if hint is not None else "base"
        shapes, positive = _shapes(op, BASE_SHAPE, hint)
        scalars = {a.name: (hint or {}).get(a.name, _value(a, op, False)) for a in op.args if a.name not in shapes}
        out.append(Sample(tag, {**_tensors(shapes, op, generator, positive, True), **scalars}, positive))
        out.append(Sample(f"{tag}, non-contiguous", {**_tensors(shapes, op, generator, positive, False), **scalars},
                          positive))
        if hint is None:
            for a in op.args:  # each argument with a default, given another value
                if a.name not in shapes and not a.required:
                    out.append(Sample(f"{a.name}={_value(a, op, True)!r}", {
                        **_tensors(shapes, op, generator, positive, True), **scalars, a.name: _value(a, op, True)},
                        positive))
            zero, zpositive = _shapes(op, (0,) + BASE_SHAPE[1:])
            out.append(Sample("zero-size", {**_tensors(zero, op, generator, zpositive, True), **scalars}, zpositive))
            for rule, names in op.sizes:
                constrained = {n for _, ns in op.checks for n in ns if isinstance(n, str)}
                if rule == "broadcast" and len(names) > 1 and not constrained & set(names[1:]):
                    wide = dict(shapes, **{n: BASE_SHAPE[-1:] for n in names[1:]})
                    out.append(Sample("broadcast", {**_tensors(wide, op, generator, positive, True), **scalars},
                                      positive))
                    break
    return out


# Running ---------------------------------------------------------------------------------------------------------

def _as_tuple(result):
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _reference(op: ReferenceOp, sample: Sample, dtype: torch.dtype):
    """The reference on the CPU in float64, from the inputs as `dtype` rounds them, cast back to `dtype`."""
    rounded = sample.converted(lambda t: t.to(dtype).to(torch.float64) if t.is_floating_point() else t)
    return tuple(r.to(dtype) for r in _as_tuple(op.reference(**rounded)))


def _on_device(sample: Sample, dtype: torch.dtype) -> dict:
    """The sample's tensors as `dtype` on the device (keeping their strides: .to preserves a dense layout)."""
    return sample.converted(lambda t: t.to(dtype).to(DEVICE))


def _compare(actual, expected, dtype, what) -> list[str]:
    rtol, atol = TOLERANCES.get(dtype, (0, 0))
    failures = []
    actual = _as_tuple(actual)
    if len(actual) != len(expected):
        return [f"{what}: {len(actual)} outputs, the reference has {len(expected)}"]
    for i, (a, e) in enumerate(zip(actual, expected)):
        try:
            torch.testing.assert_close(a.cpu(), e, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as error:
            failures.append(f"{what}, output {i}: {str(error).splitlines()[0]} ({' '.join(str(error).split())[:300]})")
    return failures


def check_forward(op: ReferenceOp) -> list[str]:
    failures = []
    for name in op.dtypes:
        dtype = DTYPES[name]
        for sample in samples(op):
            try:
                result = op.packet(**_on_device(sample, dtype))
            except Exception as error:  # noqa: BLE001 - reported as the check's failure
                failures.append(f"{name}, {sample.label}: raised {type(error).__name__}: {str(error)[:200]}")
                continue
            failures += _compare(result, _reference(op, sample, dtype), dtype, f"{name}, {sample.label}")
    return failures


def check_variants(op: ReferenceOp) -> list[str]:
    failures = []
    sample = samples(op)[0]
    for name in op.dtypes[:2]:
        dtype = DTYPES[name]
        expected = _reference(op, sample, dtype)
        if "out" in op.variants:
            outs = {o: torch.empty(0, dtype=dtype, device=DEVICE) for o in op.outputs}
            if len(outs) == 1:
                outs = {"out": next(iter(outs.values()))}
            op.packet.out(**_on_device(sample, dtype), **outs)
            failures += _compare(tuple(outs.values()), expected, dtype, f"{name}, out=")
        if "inplace" in op.variants:
            values = _on_device(sample, dtype)
            getattr(getattr(torch.ops, op.namespace), op.name + "_")(**values)
            failures += _compare(values["self"], expected, dtype, f"{name}, in-place")
    return failures


def _differentiable_inputs(op: ReferenceOp, sample: Sample) -> list[str]:
    return [a.name for a in op.args if _is_tensor(a) and isinstance(sample.values.get(a.name), torch.Tensor)
            and sample.values[a.name].numel() > 0]


def check_gradcheck(op: ReferenceOp) -> list[str]:
    if not op.differentiable:
        return []
    sample = samples(op)[0]
    names = _differentiable_inputs(op, sample)
    values = _on_device(sample, torch.float64)
    leaves = [values[n].detach().requires_grad_() for n in names]

    def call(*tensors):
        return op.packet(**{**values, **dict(zip(names, tensors))})
    try:
        torch.autograd.gradcheck(call, leaves)  # (fast mode mispairs outputs around a non-differentiable one)
    except Exception as error:  # noqa: BLE001
        return [f"gradcheck: {' '.join(str(error).split())[:400]}"]
    return []


def check_autograd(op: ReferenceOp) -> list[str]:
    if not op.differentiable:
        return []
    sample = samples(op)[0]
    names = _differentiable_inputs(op, sample)
    device = _on_device(sample, torch.float64)
    leaves = {n: device[n].detach().requires_grad_() for n in names}
    outputs = _as_tuple(op.packet(**{**device, **leaves}))
    generator = torch.Generator().manual_seed(1)
    grads = [torch.randn(o.shape, dtype=torch.float64, generator=generator) for o in outputs]
    # Outputs the op declares non-differentiable (output_differentiability) take no gradient on either side.
    differentiable = [i for i, o in enumerate(outputs) if o.requires_grad]
    got = torch.autograd.grad([outputs[i] for i in differentiable], list(leaves.values()),
                              [grads[i].to(DEVICE) for i in differentiable], allow_unused=True)
    cpu_leaves = {n: sample.values[n].detach().clone().requires_grad_() for n in names}
    ref_outputs = _as_tuple(op.reference(**{**sample.values, **cpu_leaves}))
    ref_used = [(ref_outputs[i], grads[i]) for i in differentiable]
    expected = torch.autograd.grad([o for o, _ in ref_used], list(cpu_leaves.values()), [g for _, g in ref_used],
                                   allow_unused=True)
    failures = []
    for name, g, e in zip(names, got, expected):
        g = torch.zeros_like(cpu_leaves[name]) if g is None else g.cpu()
        e = torch.zeros_like(cpu_leaves[name]) if e is None else e
        try:
            torch.testing.assert_close(g, e, rtol=1e-6, atol=1e-6)
        except AssertionError as error:
            failures.append(f"gradient of {name} differs from autograd through the reference: "
                            f"{' '.join(str(error).split())[:300]}")
    return failures


def check_opcheck(op: ReferenceOp) -> list[str]:
    sample = samples(op)[0]
    values = _on_device(sample, DTYPES[op.dtypes[0]])
    schema_order = [a.name for a in op.args]
    try:
        torch.library.opcheck(op.packet.default, tuple(values[n] for n in schema_order))
    except Exception as error:  # noqa: BLE001
        return [f"opcheck: {' '.join(str(error).split())[:400]}"]
    return []


def check_compile(op: ReferenceOp) -> list[str]:
    sample = samples(op)[0]
    dtype = DTYPES[op.dtypes[0]]
    values = _on_device(sample, dtype)
    torch._dynamo.reset()
    compiled = torch.compile(lambda kw: op.packet(**kw), fullgraph=True)
    try:
        result = compiled(values)
    except Exception as error:  # noqa: BLE001
        return [f"torch.compile(fullgraph=True): {type(error).__name__}: {' '.join(str(error).split())[:300]}"]
    return _compare(result, tuple(r.cpu() for r in _as_tuple(op.packet(**values))), dtype, "compiled")


def _expect_refusal(op: ReferenceOp, values: dict, what: str, contains: str = "") -> list[str]:
    try:
        op.packet(**values)
        torch.simhpu.synchronize()
    except Exception as error:  # noqa: BLE001
        message = str(error)
        if op.name not in message or contains not in message:
            return [f"{what}: refused, but the message does not name {op.name!r}"
                    f"{' and ' + repr(contains) if contains else ''}: {message[:200]}"]
        return []
    return [f"{what}: accepted"]


def check_refused_dtype(op: ReferenceOp) -> list[str]:
    other = next((d for d in ("int32", "float64", "float32", "int64") if d not in op.dtypes), None)
    if other is None or op.composite:  # (a composite's dtypes are those of the ops it calls)
        return []
    sample = samples(op)[0]
    failures = _expect_refusal(op, _on_device(sample, DTYPES[other]), f"dtype {other}", "dtype")
    failures += check_forward_once(op)  # the device is still usable
    return failures


def check_forward_once(op: ReferenceOp) -> list[str]:
    sample, dtype = samples(op)[0], DTYPES[op.dtypes[0]]
    try:
        return _compare(op.packet(**_on_device(sample, dtype)), _reference(op, sample, dtype), dtype, "after it")
    except Exception as error:  # noqa: BLE001
        return [f"after it: the device failed: {error}"]


def check_declared_checks(op: ReferenceOp) -> list[str]:
    failures = []
    base = samples(op)[0]
    dtype = DTYPES[op.dtypes[0]]
    for rule, names in op.checks:
        broken = dataclasses.replace(base, values=dict(base.values))
        if rule in ("same_shape", "last_dim", "trailing_shape", "broadcasts_to", "row_stat"):
            target = {"same_shape": names[1], "last_dim": names[1], "trailing_shape": names[1],
                      "broadcasts_to": names[0], "row_stat": names[0]}[rule]
            value = broken.values[target]
            grow = lambda t: torch.randn(t.shape[:-1] + (t.shape[-1] + 1,), dtype=t.dtype) if t.dim() else t  # noqa
            broken.values[target] = [grow(t) for t in value] if isinstance(value, list) else grow(value)
        elif rule == "one_of":
            broken.values[names[0]] = "not_one_of_them"
        else:
            continue
        failures += _expect_refusal(op, _on_device(broken, dtype), f"check {rule}({', '.join(map(str, names))})")
    if failures:
        failures += check_forward_once(op)
    return failures


RUNNERS = {"forward": check_forward, "variants": check_variants, "gradcheck": check_gradcheck,
           "autograd": check_autograd, "opcheck": check_opcheck, "compile": check_compile,
           "refused_dtype": check_refused_dtype, "declared_checks": check_declared_checks}


def run(op: ReferenceOp, checks=CHECKS) -> dict[str, list[str]]:
    """Each check's failures (an empty list: it passed); a check that raises is a failure too."""
    results = {}
    for name in checks:
        try:
            results[name] = RUNNERS[name](op)
        except Exception as error:  # noqa: BLE001
            results[name] = [f"the check itself failed: {type(error).__name__}: {str(error)[:300]}"]
        torch.simhpu.synchronize()
    return results
