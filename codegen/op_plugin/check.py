"""Holding op-plugin's output rules to ATen: each official gen_opapi entry's `size:` and `dtype:`
rules, evaluated for the calls PyTorch's own operator database makes, against what ATen's CPU
kernels return for those calls. A wrong rule in someone's YAML is then reported at its file:line,
a check op-plugin's own CI cannot make without an NPU.

The calls are recorded, not guessed: each OpInfo of `op_db` is run on CPU under a dispatch mode
that sees every aten call with its arguments and outputs, so an entry is checked for the overload
PyTorch actually reaches from its public API.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torchgen.model import FunctionSchema

from ..model.op_plugin_rules import RuleUnreadable, Tensor, _rule_value, call_values, evaluate, parse
from .dialect import DialectEntry, DialectReport


@dataclass
class RuleCheck:
    entry: DialectEntry
    calls: int = 0  # recorded aten calls the entry's rules were evaluated for
    mismatches: list = field(default_factory=list)  # (output, what, rule's, ATen's, the call)
    unreadable: str = ""


def signature_key(schema: FunctionSchema) -> str:
    """What a functional call and its out= form share: the schema without its overload name, out
    arguments and defaults (torchgen's signature)."""
    return str(schema.signature(strip_default=True))


class _Recorder(TorchDispatchMode):
    """Records each aten call whose signature an entry has: (key, func, args, kwargs, outputs)."""

    def __init__(self, wanted: set[str]):
        super().__init__()
        self.wanted, self.calls, self.keys = wanted, [], {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        key = self.keys.get(func)
        if key is None:
            try:
                key = self.keys[func] = signature_key(FunctionSchema.parse(str(func._schema).removeprefix("aten::")))
            except Exception:  # a schema torchgen does not read (a prim, a custom op): no entry has it
                key = self.keys[func] = ""
        if key in self.wanted:
            self.calls.append((key, func, args, kwargs, out))
        return out


def _bind(func, args, kwargs) -> dict:
    arguments = func._schema.arguments
    return call_values([a.name for a in arguments if not a.kwarg_only], args, kwargs,
                       {a.name: a.default_value if a.has_default_value() else None for a in arguments})


def _outputs(out) -> list:
    return [o for o in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(o, torch.Tensor)]


def check_rules(report: DialectReport, samples_per_op: int = 4, ops=None) -> list[RuleCheck]:
    """Each official entry with output rules, checked against the calls op_db makes (CPU, float32
    and the OpInfo's other dtypes as its samples give)."""
    from torch.testing._internal.common_methods_invocations import op_db

    checks = {e.name: RuleCheck(e) for e in report.entries
              if e.section == "official" and e.gen_opapi is not None and e.gen_opapi.outputs
              and (ops is None or e.name in ops)}
    parsed = {}
    for name, check in checks.items():
        try:
            parsed[name] = [(rule.name, parse(rule.size) if rule.size else None, parse(rule.dtype) if rule.dtype else None)
                            for rule in check.entry.gen_opapi.outputs]
        except RuleUnreadable as e:
            check.unreadable = str(e)
    by_key: dict[str, list[str]] = {}  # an entry's functional and out= forms share a key
    for name in parsed:
        by_key.setdefault(signature_key(checks[name].entry.schema), []).append(name)
    bases = {name.split(".")[0].rstrip("_") for name in parsed}
    for info in op_db:
        if info.name.split(".")[0] not in bases and getattr(info, "aten_name", "") not in bases:
            continue
        for dtype in (torch.float32, torch.int64):
            if dtype not in info.supported_dtypes("cpu"):
                continue
            try:
                samples = list(info.sample_inputs("cpu", dtype))[:samples_per_op]
            except Exception:  # an OpInfo whose sample generator needs what this machine lacks
                continue
            for sample in samples:
                recorder = _Recorder(set(by_key))
                try:
                    with recorder:
                        info.op(sample.input, *sample.args, **sample.kwargs)
                except Exception:  # a sample ATen itself refuses says nothing of the rules
                    continue
                for key, func, args, kwargs, out in recorder.calls:
                    for name in by_key[key]:
                        _check_call(checks[name], parsed[name], func, args, kwargs, out)
    return list(checks.values())


def _check_call(check: RuleCheck, rules, func, args, kwargs, out) -> None:
    if check.unreadable:
        return
    values = _bind(func, args, kwargs)
    for (name, _, _), output in zip(rules, _outputs(out)):
        values.setdefault(name, _rule_value(output))
    outputs = _outputs(out)
    try:
        for (name, size, dtype), actual in zip(rules, outputs):
            if size is not None:
                got = evaluate(size, values)
                got = got.sizes if isinstance(got, Tensor) else tuple(got) if isinstance(got, (list, tuple)) else got
                if tuple(got) != tuple(actual.shape):
                    check.mismatches.append((name, "size", tuple(got), tuple(actual.shape), _describe(values)))
            if dtype is not None:
                got = evaluate(dtype, values)
                got = got.dtype if isinstance(got, Tensor) else got
                if got != actual.dtype:
                    check.mismatches.append((name, "dtype", got, actual.dtype, _describe(values)))
    except RuleUnreadable as e:
        check.unreadable = str(e)
        return
    except Exception as e:  # a rule that fails for a real call (an index past the rank, ...) is a wrong rule
        check.mismatches.append(("", "evaluation", type(e).__name__, str(e)[:80], _describe(values)))
        return
    check.calls += 1


def _describe(values: dict) -> str:
    parts = []
    for name, v in values.items():
        if isinstance(v, Tensor):
            parts.append(f"{name}={list(v.sizes)} {str(v.dtype).removeprefix('torch.')}")
        elif v is not None and not isinstance(v, tuple):
            parts.append(f"{name}={v!r}")
    return ", ".join(parts)[:160]


def summary(checks: list[RuleCheck], file: str) -> str:
    agreed = [c for c in checks if c.calls and not c.mismatches and not c.unreadable]
    wrong = [c for c in checks if c.mismatches]
    unreadable = [c for c in checks if c.unreadable and not c.mismatches]
    unreached = [c for c in checks if not c.calls and not c.mismatches and not c.unreadable]
    lines = [f"output rules of {len(checks)} official gen_opapi entries, against ATen on op_db's calls: "
             f"{len(agreed)} agree ({sum(c.calls for c in agreed)} calls), {len(wrong)} disagree, "
             f"{len(unreadable)} not readable here, {len(unreached)} reached by no op_db sample"]
    for c in wrong:
        output, what, rule, aten, call = c.mismatches[0]
        lines.append(f"{file}:{c.entry.line}: {c.entry.name}: gen_opapi {output} {what}: the rule gives {rule}, "
                     f"ATen {aten}, for {call}" + (f" (and {len(c.mismatches) - 1} more)" if len(c.mismatches) > 1 else ""))
    for c in unreadable:
        lines.append(f"{file}:{c.entry.line}: {c.entry.name}: not checked: {c.unreadable}")
    return "\n".join(lines)
