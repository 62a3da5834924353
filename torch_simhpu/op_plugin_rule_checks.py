"""op-plugin's output rules at run time: the values a call gives them, the outputs they expect,
the check of a kernel's outputs against them, and fake kernels made of them; with the libraries
that keep the run-time registrations alive. Shared by load_op_plugin (op_plugin.py), references
(op_plugin_references.py) and wheels built from op-plugin's YAML (their generated op_plugin.py)."""
from __future__ import annotations

import torch

_libraries: list[torch.library.Library] = []  # keeps the registrations alive


def defined(ops, base: str, overload: str):
    """The OpOverload already registered under the name, or None."""
    try:
        packet = getattr(ops, base)
        return getattr(packet, overload) if overload in packet.overloads() else None
    except AttributeError:
        return None


def readable_rules(entry):
    """[(size, dtype)] parsed, one a return, or None when a rule is missing or unreadable."""
    from torch_simhpu.codegen.model.op_plugin_rules import RuleUnreadable, parse

    gen = entry.gen_opapi
    if gen is None or not gen.outputs or len(gen.outputs) != len(entry.schema.returns):
        return None
    if not all(r.size and r.dtype for r in gen.outputs):
        return None
    try:
        return [(parse(r.size), parse(r.dtype)) for r in gen.outputs]
    except RuleUnreadable:
        return None


def expected(rules, values):
    """Each output's (size, dtype) by its rules over a call's values."""
    from torch_simhpu.codegen.model.op_plugin_rules import Tensor, evaluate

    for size, dtype in rules:
        shape, kind = evaluate(size, values), evaluate(dtype, values)
        yield (shape.sizes if isinstance(shape, Tensor) else tuple(shape),
               kind.dtype if isinstance(kind, Tensor) else kind)


def check_rule(where: str, index: int, shape, dtype, result: torch.Tensor, computed: str, fix: str) -> None:
    """Fails the call when output `index` is not the size and dtype the entry's gen_opapi rule gives."""
    if tuple(shape) != tuple(result.shape) or dtype != result.dtype:
        raise RuntimeError(
            f"{where}: gen_opapi's rule for output {index} gives size {list(shape)} and dtype "
            f"{str(dtype).removeprefix('torch.')}, where {computed} {list(result.shape)} and "
            f"{str(result.dtype).removeprefix('torch.')}: fix the entry's size:/dtype: {fix}")


def rule_values(entry, args, kwargs):
    """A call of a dialect entry as its rules see it (rule_call_values), and its tensors' device."""
    return rule_call_values([a.name for a in entry.schema.arguments.flat_all], args, kwargs)


def rule_call_values(names, args, kwargs):
    """The call by the schema's argument names, as the rules see it, and its first tensor's device."""
    from torch_simhpu.codegen.model.op_plugin_rules import call_values

    given = [*args, *kwargs.values()]
    tensors = [t for v in given for t in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(t, torch.Tensor)]
    return call_values(names, args, kwargs), tensors[0].device if tensors else None


def fake_from_rules(names, rules):
    def fake(*args, **kwargs):
        values, device = rule_call_values(names, args, kwargs)
        outputs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in expected(rules, values)]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
    return fake


def register_rule_fakes(library: torch.library.Library, namespace: str, rules_by_op: dict) -> None:
    """Fake kernels from op-plugin's output rules, for the operators a dialect file was built with
    (torch_simhpu._generated.op_plugin): operator -> (argument names, ((size, dtype) parsed, a return))."""
    for name, (arguments, rules) in rules_by_op.items():
        torch.library.register_fake(f"{namespace}::{name}", fake_from_rules(arguments, rules), lib=library)
