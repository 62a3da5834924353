"""Simulated kernels for op-plugin's custom operators, each written once as a reference in YAML.

    custom:
      - func: npu_swiglu(Tensor self, int dim=-1) -> Tensor
        reference: npu.swiglu(self, dim)
        doc: SwiGLU over dim: silu(first half) * second half, computed in float32.

A references file is simhpu's YAML for operators whose kernel is a composite of ATen operators:
`func:` is the operator's schema as op-plugin declares it, `reference:` what it computes, one
Python expression over its arguments, `torch` and the helper names the caller provides (checked
as simhpu's own `reference:` is: no other name, no `_` attribute, no lambda or string of code).
Each becomes a CompositeImplicitAutograd kernel of the operator on simhpu: its ATen operators
are device launches, autograd differentiates through them, and FakeTensorMode and torch.compile
trace them. Where op-plugin's own YAML is loaded too (load_op_plugin(..., references=)), the
reference replaces the missing torch_npu kernel of the entry of the same name, whose schema it
must repeat, and that entry's readable gen_opapi output rules are checked at every call, as a
simulated ACLNN kernel's are. A tensor on another device is refused, as torch_npu's kernels do,
except the arguments an entry's `host:` names: those the adapter reads on the host (cumulative
sequence lengths given as tensors), which must be CPU tensors.
"""
from __future__ import annotations

import builtins
import os
from dataclasses import dataclass, field

import torch

from torch_simhpu import op_plugin_rule_checks as rule_checks
from torch_simhpu._device_name import DEVICE_TYPE

_ALLOWED_DEVICES = (DEVICE_TYPE, "meta")


@dataclass
class Reference:
    name: str  # the operator's name with its overload, e.g. npu_swiglu or npu_apply_adam.out
    schema: object  # torchgen FunctionSchema
    expression: str
    file: str
    line: int
    doc: str = ""
    tags: tuple = ()  # torch.Tag names, e.g. nondeterministic_seeded for one that draws random numbers
    host: tuple = ()  # tensor arguments the adapter reads on the host: they must be on the CPU

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class LoadedReferences:
    file: str
    defined: list[str] = field(default_factory=list)  # operators the file defined and gave a kernel
    replaced: list[str] = field(default_factory=list)  # op-plugin entries whose missing kernel it replaced
    kept: list[str] = field(default_factory=list)  # simhpu's own operators of the name, left as they are

    def __str__(self) -> str:
        return (f"{self.file}: {len(self.defined) + len(self.replaced)} operators with simulated kernels "
                f"({len(self.replaced)} of op-plugin's entries)"
                + (f"; simhpu's own kept for {', '.join(self.kept)}" if self.kept else ""))


def read_references(path: str | os.PathLike, helper_names=()) -> dict[str, Reference]:
    """The file's references by operator name, every field checked; problems at file:line."""
    from torchgen.model import FunctionSchema

    from torch_simhpu.codegen.errors import Problems
    from torch_simhpu.codegen.simhpu_yaml.reference import check_reference
    from torch_simhpu.codegen.yaml_loader import LineDict, entry_list, load_yaml_file

    path = os.fspath(path)
    problems = Problems()
    doc = load_yaml_file(path, path, problems, empty=LineDict())
    references: dict[str, Reference] = {}
    entries = entry_list(doc, "custom", path, problems) if doc is not None else None
    for entry in entries or []:
        if not isinstance(entry, LineDict):
            problems.add(path, getattr(entries, "line", 1), "(file)", "custom", "expected a mapping per entry",
                         "write each entry as '- func: SCHEMA' with a 'reference:'")
            continue
        label = str(entry.get("func", "(an entry)"))[:80]
        unknown = sorted(set(entry) - {"func", "reference", "doc", "tags", "host"})
        for key in unknown:
            problems.add(path, entry.line_of(key), label, key,
                         "a references file has func:, reference:, tags:, host: and doc: only", f"remove '{key}:'")
        tags = entry.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) and hasattr(torch.Tag, t) for t in tags):
            problems.add(path, entry.line_of("tags"), label, "tags", f"expected a list of torch.Tag names, got {tags!r}",
                         "e.g. tags: [nondeterministic_seeded]")
            continue
        try:
            schema = FunctionSchema.parse(str(entry.get("func", "")))
        except Exception as error:  # noqa: BLE001 - torchgen raises AssertionError and others
            problems.add(path, entry.line_of("func"), label, "func", f"the schema does not parse ({error})",
                         "write the schema as op-plugin's YAML declares it")
            continue
        names = [a.name for a in schema.arguments.flat_all]
        host = entry.get("host", [])
        tensor_names = [a.name for a in schema.arguments.flat_all if a.type.is_tensor_like()]
        if not isinstance(host, list) or not all(isinstance(h, str) and h in tensor_names for h in host):
            problems.add(path, entry.line_of("host"), label, "host",
                         f"expected a list of the schema's tensor arguments, got {host!r}",
                         f"name arguments among {', '.join(tensor_names) or '(none)'}")
            continue
        problem = check_reference(entry.get("reference"), names + list(helper_names))
        if problem:
            problems.add(path, entry.line_of("reference"), label, "reference", *problem)
            continue
        name = str(schema.name)
        if name in references:
            problems.add(path, entry.line, label, "func", f"{name} has a reference already, at line "
                         f"{references[name].line}", "keep one entry per operator")
            continue
        doc_text = entry.get("doc", "")
        if not isinstance(doc_text, str):
            problems.add(path, entry.line_of("doc"), label, "doc", "expected text", "write the doc as one string")
            continue
        references[name] = Reference(name, schema, entry["reference"].strip(), path, entry.line, doc_text, tuple(tags),
                                    tuple(host))
    problems.raise_if_any()
    return references


def _check_one_device(qualname: str, values: dict) -> None:
    """One kernel runs on one device: tensors on two of them are refused, in PyTorch's words."""
    first = None
    for name, value in values.items():
        for tensor in _tensors([value]):
            if tensor.device.type != DEVICE_TYPE:
                continue
            if first is None:
                first = tensor.device
            elif tensor.device != first:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"{first} and {tensor.device}! ({qualname}, argument '{name}')")


def kernel(reference: Reference, namespace: str, helpers: dict, rules=None, rules_where: str = ""):
    """The operator's kernel: the reference over the call's arguments, outputs checked against the
    schema (and against op-plugin's gen_opapi rules when given), none an alias of an input."""
    qualname = f"{namespace}::{reference.name}"
    code = compile(reference.expression, reference.where, "eval")
    parsed = torch._C.parse_schema(str(reference.schema))
    names = [a.name for a in parsed.arguments]
    # The dispatcher passes what the caller gave; the schema's defaults fill in the rest.
    defaults = {a.name: a.default_value for a in parsed.arguments if a.has_default_value()}
    returns = len(reference.schema.returns)
    tensor_returns = [isinstance(r.type, torch.TensorType) for r in parsed.returns]
    list_returns = [isinstance(r.type, torch.ListType) for r in parsed.returns]
    # An out= overload's returns are its written arguments themselves (Tensor(a!)), which the reference
    # writes: the call returns those tensors, not copies.
    written_argument = {i: a.name for i, r in enumerate(parsed.returns) if r.alias_info is not None
                        for a in parsed.arguments
                        if a.alias_info is not None and a.alias_info.is_write
                        and a.alias_info.before_set == r.alias_info.before_set}
    # The expression can name nothing but its arguments, torch and the helpers (read_references); C code
    # it calls may still import lazily, which looks __import__ up in the calling frame's builtins.
    scope = {"__builtins__": {"__import__": builtins.__import__}, "torch": torch, **helpers}

    def run(*args, **kwargs):
        values = {**defaults, **dict(zip(names, args)), **kwargs}
        inputs = _tensors(values.values())
        for name, value in values.items():
            for tensor in _tensors([value]):
                if name in reference.host:
                    if tensor.device.type not in ("cpu", "meta"):
                        raise RuntimeError(f"{qualname}: argument '{name}' is on {tensor.device}; the kernel reads "
                                           f"it on the host, so it must be a CPU tensor (move it with .cpu())")
                    continue
                if tensor.device.type not in _ALLOWED_DEVICES:
                    raise RuntimeError(f"{qualname}: argument '{name}' is on {tensor.device}; torch_npu's kernels "
                                       f"take tensors on {DEVICE_TYPE} (move it with .to('{DEVICE_TYPE}'))")
        _check_one_device(qualname, {n: v for n, v in values.items() if n not in reference.host})
        result = eval(code, scope, values)  # noqa: S307 - checked by read_references: no names but these
        outputs = [result] if returns == 1 else list(result) if isinstance(result, (tuple, list)) else [result]
        if len(outputs) != returns or any(isinstance(o, torch.Tensor) != t for o, t in zip(outputs, tensor_returns)) \
                or any(is_list and not all(isinstance(t, torch.Tensor) for t in o)
                       for o, is_list in zip(outputs, list_returns)):
            raise RuntimeError(f"{qualname} ({reference.where}): its reference gives {len(outputs)} values, the "
                               f"schema returns {reference.schema.returns}: fix the reference")
        outputs = [values[written_argument[i]] if i in written_argument
                   else [_own(t, inputs) for t in o] if is_list else _own(o, inputs) if isinstance(o, torch.Tensor) else o
                   for i, (o, is_list) in enumerate(zip(outputs, list_returns))]
        if rules is not None:
            _check_rules(qualname, rules, rules_where, names, args, kwargs,
                         [o for o, t in zip(outputs, tensor_returns) if t])
        return outputs[0] if returns == 1 else tuple(outputs)

    run.__name__ = reference.name.replace(".", "_")
    return run


def _own(output: torch.Tensor, inputs) -> torch.Tensor:
    """The output, or a copy where it is a view or one of the inputs (a functional operator's outputs
    alias nothing)."""
    return output.clone() if output._is_view() or any(output is i for i in inputs) else output


def _tensors(values):
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def _check_rules(qualname, rules, where, names, args, kwargs, outputs):
    from torch_simhpu.codegen.model.op_plugin_rules import RuleUnreadable

    values, _ = rule_checks.rule_call_values(names, args, kwargs)
    try:
        expected = list(rule_checks.expected(rules, values))
    except RuleUnreadable:
        return  # a name only this call's arguments miss
    for index, ((shape, dtype), output) in enumerate(zip(expected, outputs)):
        rule_checks.check_rule(f"{qualname} ({where})", index, shape, dtype, output, "the reference computes",
                             "rule or the reference")


def register(library: torch.library.Library, reference: Reference, namespace: str, helpers: dict, *,
             define: bool, rules=None, rules_where: str = "") -> None:
    if define:
        library.define(str(reference.schema), tags=tuple(getattr(torch.Tag, t) for t in reference.tags))
    library.impl(reference.name, kernel(reference, namespace, helpers, rules, rules_where),
                 "CompositeImplicitAutograd")


def load_references(path: str | os.PathLike, namespace: str = "npu", *, helpers: dict | None = None
                    ) -> LoadedReferences:
    """Defines each operator of a references file that no one has defined yet, with its reference as its
    kernel; one simhpu already has is kept as it is (module doc)."""
    helpers = dict(helpers or {})
    references = read_references(path, helpers)
    loaded = LoadedReferences(os.fspath(path))
    library = torch.library.Library(namespace, "FRAGMENT")
    rule_checks._libraries.append(library)
    ops = getattr(torch.ops, namespace)
    for name, reference in references.items():
        base, _, overload = name.partition(".")
        if rule_checks.defined(ops, base, overload or "default") is not None:
            loaded.kept.append(name)
            continue
        register(library, reference, namespace, helpers, define=True)
        loaded.defined.append(name)
    return loaded
