"""op-plugin's dialect (codegen/op_plugin/dialect.py) translated into the typed model every
generator reads (codegen/model/operators.py's Operator), so a dialect file builds through the same
renderers as simhpu's own YAML:

- an official entry whose gen_opapi block names an ACLNN kernel and gives each output a size and a
  dtype rule simhpu can read becomes an "aclnn" operator: a simulated ACLNN kernel (ATen's CPU
  kernel as the device kernel, its outputs checked against the rules at every call);
- any other official entry needs nothing: the aten operator runs on simhpu's reference path;
- a custom, symint-only, autograd-only or quant entry becomes an "unprovided" operator: its schema
  and tags are defined in the namespace, its kernel is torch_npu's (calling it raises
  NotImplementedError naming the kernel), its rules, where readable, are its fake kernel.
"""
from __future__ import annotations

import torch

from ..errors import Problems
from ..model.op_plugin_rules import RuleUnreadable, parse
from ..model.op_plugin_rules_cpp import render
from ..model.operators import Operator, Project
from .dialect import DialectEntry, DialectReport

CUSTOM_SECTIONS = ("custom", "symint", "autograd", "quant")


def translate(report: DialectReport, problems: Problems, target, namespace: str = "npu") -> Project:
    ops, rejected = [], set()
    for entry in report.entries:
        if entry.section not in CUSTOM_SECTIONS:
            rules = _rules(entry)
            if rules is not None:  # else the reference path serves it, unchecked
                ops.append(_operator(entry, report.file, "official", "aclnn", rules))
            continue
        if not _defines(entry, report.file, problems):
            rejected.add(entry.name)
            continue
        rules = _rules(entry)
        if rules and not all(size is not None and dtype is not None for size, dtype in rules):
            rules = None  # a fake kernel needs every output's size and dtype
        ops.append(_operator(entry, report.file, "custom", "unprovided", rules or ()))
    return Project("simhpu", namespace, tuple(ops), frozenset(rejected), target=target)


def _operator(entry: DialectEntry, file: str, kind: str, implementation: str, rules) -> Operator:
    gen = entry.gen_opapi
    return Operator(kind, implementation, entry.schema, gen.kernel if gen is not None else "", (), (), (), (), False,
                    "", file, entry.line, tags=entry.tags, rules=tuple(rules))


def _rules(entry: DialectEntry):
    """((size, dtype) parsed, a return), or None when the entry has no rules simhpu can read (why is
    `check`'s and `check-rules`' to say)."""
    gen = entry.gen_opapi
    if gen is None or not gen.kernel or not gen.outputs:
        return None
    by_name = {r.name: r for r in gen.outputs}
    out_args = [a.name for a in entry.schema.arguments.out]
    ordered = [by_name.get(n) for n in out_args] if out_args else list(gen.outputs)
    if len(ordered) != len(entry.schema.returns) or any(r is None or not (r.size or r.dtype) for r in ordered):
        return None
    arguments = frozenset(a.name for a in entry.schema.arguments.flat_all)
    try:  # a missing size or dtype rule (an out= tensor's dtype is the caller's) is None: not checked
        rules = tuple((parse(r.size) if r.size else None, parse(r.dtype) if r.dtype else None) for r in ordered)
        for rule in (r for pair in rules for r in pair if r is not None):
            render(rule, arguments)  # what C++ cannot be written for is not used in Python either
    except RuleUnreadable:
        return None
    return rules


def _defines(entry: DialectEntry, file: str, problems: Problems) -> bool:
    """A custom entry's schema and tags as torch's own registry takes them."""
    try:
        torch._C.parse_schema(str(entry.schema))
    except RuntimeError as e:
        problems.add(file, entry.line, entry.name, "func", f"torch cannot define this schema: "
                     f"{str(e).splitlines()[0][:160]}", "write the schema as native_functions.yaml does")
        return False
    unknown = [t for t in entry.tags if not hasattr(torch.Tag, t)]
    if unknown:
        problems.add(file, entry.line, entry.name, "tags", f"'{unknown[0]}' is not a tag of this torch "
                     f"(torch.Tag)", "use a tag of native_functions.yaml, e.g. nondeterministic_seeded")
        return False
    return True
