"""op-plugin's custom operators, registered at run time from its own YAML:

    import torch_simhpu
    loaded = torch_simhpu.load_op_plugin("op_plugin/config/op_plugin_functions.yaml")
    print(loaded)                                  # what was registered, and how
    torch.ops.npu.npu_scaled_mask(x, mask, 0.5)    # a callable name

The file is read by the codegen's dialect reader (torch_simhpu.codegen.op_plugin.dialect: the
entries the installed torch's version serves, every field checked, problems at file:line). Each
custom operator (the `custom`, `symint`-only and `quant` sections) that simhpu does not already
provide is defined in the `npu` namespace with its schema and tags. Its kernel is torch_npu's
(an ACLNN kernel, or a hand-written adapter), which simhpu does not have: calling it on the
device raises NotImplementedError naming the kernel and how to provide one. Where its gen_opapi
output rules can be read (torch_simhpu.codegen.model.op_plugin_rules), they are its fake kernel, so
torch.compile and FakeTensorMode trace it. Official entries need nothing: every aten operator
already runs on simhpu (ATen's CPU kernel as a device kernel), whatever file declares it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from torch_simhpu.op_plugin_rule_checks import (_libraries, check_rule, defined, expected, fake_from_rules,
                                                readable_rules, rule_values)

_SECTIONS = ("custom", "symint", "autograd", "quant")


@dataclass
class LoadedOpPlugin:
    """What load_op_plugin registered."""
    file: str
    version: str
    defined: list[str] = field(default_factory=list)  # new callable names, kernel-less
    with_fake: list[str] = field(default_factory=list)  # of those, traced by their gen_opapi rules
    provided: list[str] = field(default_factory=list)  # already simhpu's own (its YAML's), same schema
    clashes: list[str] = field(default_factory=list)  # simhpu's own under the name, with another schema
    simulated: list[str] = field(default_factory=list)  # official entries run as simulated ACLNN kernels
    referenced: list[str] = field(default_factory=list)  # custom operators given their reference as kernel
    official: int = 0  # aten operators the file names: simhpu runs them all already

    def __str__(self) -> str:
        return (f"{self.file} for torch {self.version}: {len(self.defined)} custom operators defined "
                f"(torch.ops.npu.*; {len(self.with_fake)} with a fake kernel from their gen_opapi rules), "
                f"{len(self.provided)} already simhpu's own"
                + (f" and {len(self.clashes)} simhpu's own under another schema ({', '.join(self.clashes)})"
                   if self.clashes else "")
                + f", {self.official} official entries (aten operators, which run on simhpu already"
                + (f"; {len(self.simulated)} of them as simulated ACLNN kernels, their rules checked on each call"
                   if self.simulated else "") + ")"
                + (f"; {len(self.referenced)} custom operators run by their references" if self.referenced else ""))


def load_op_plugin(path: str | os.PathLike, namespace: str = "npu", *, simulate_aclnn: bool = False,
                   references: str | os.PathLike | None = None, helpers: dict | None = None) -> LoadedOpPlugin:
    """Registers the custom operators of an op-plugin op_plugin_functions.yaml (module doc).

    references: a references file (torch_simhpu.op_plugin_references): an operator it has runs its
    reference in place of the missing torch_npu kernel, with the entry's gen_opapi rules checked at
    each call; its schema must be the entry's. Its operators the YAML does not declare are defined
    too. helpers: the names its expressions may use besides the arguments and torch.

    simulate_aclnn: also run each functional official entry with readable gen_opapi rules as a
    simulated ACLNN kernel, in place of simhpu's own kernel for that aten operator for the rest of
    the process: its outputs are allocated by the entry's rules, filled with what ATen's CPU kernel
    computes, and a rule that disagrees with ATen fails the call, naming the entry's file:line."""
    from torch_simhpu.codegen.errors import Problems
    from torch_simhpu.codegen.op_plugin.dialect import is_dialect, load_dialect
    from torch_simhpu.codegen.yaml_loader import LineDict, load_yaml_file

    path = os.fspath(path)
    problems = Problems()
    doc = load_yaml_file(path, path, problems, empty=LineDict())
    if doc is not None and not is_dialect(doc):
        raise ValueError(f"load_op_plugin: {path} is not in op-plugin's dialect (it has no all_version:); "
                         "simhpu's own YAML is built into a wheel instead (docs/own_ops.md)")
    report = load_dialect(doc, path, problems) if doc is not None else None
    problems.raise_if_any()
    from torch_simhpu import op_plugin_references

    helpers = dict(helpers or {})
    referenced = op_plugin_references.read_references(references, helpers) if references is not None else {}
    loaded = LoadedOpPlugin(path, report.version)
    library = torch.library.Library(namespace, "FRAGMENT")
    _libraries.append(library)
    namespace_ops = getattr(torch.ops, namespace)
    aten = torch.library.Library("aten", "IMPL") if simulate_aclnn else None
    if aten is not None:
        _libraries.append(aten)
    for entry in report.entries:
        if entry.section not in _SECTIONS:
            loaded.official += 1
            kernel = _simulated_aclnn(entry, path) if aten is not None else None
            if kernel is not None:
                aten.impl(entry.name, kernel, "PrivateUse1")
                loaded.simulated.append(entry.name)
            continue
        name = entry.name
        base, _, overload = name.partition(".")
        existing = defined(namespace_ops, base, overload or "default")
        if existing is not None:
            same = str(existing._schema).partition("::")[2] == str(entry.schema)
            (loaded.provided if same else loaded.clashes).append(name)
            continue
        tags = tuple(getattr(torch.Tag, t) for t in entry.tags if hasattr(torch.Tag, t))
        reference = referenced.pop(name, None)
        if reference is not None:
            if str(reference.schema) != str(entry.schema):
                raise ValueError(f"{reference.where}: {name}'s schema is not the one {path}:{entry.line} declares "
                                 f"({entry.schema}): repeat it as it is there")
            library.define(str(entry.schema), tags=tags)
            op_plugin_references.register(library, reference, namespace, helpers, define=False,
                                          rules=readable_rules(entry), rules_where=f"{path}:{entry.line}")
            loaded.referenced.append(name)
            continue
        library.define(str(entry.schema), tags=tags)
        kernel = entry.gen_opapi.kernel if entry.gen_opapi is not None and entry.gen_opapi.kernel else None
        library.impl(name, _missing_kernel(f"{namespace}::{name}", kernel, path, entry.line), "PrivateUse1")
        fake = _fake_kernel(entry)
        if fake is not None:
            torch.library.register_fake(f"{namespace}::{name}", fake, lib=library)
            loaded.with_fake.append(name)
        loaded.defined.append(name)
    for name, reference in referenced.items():  # the references' operators this YAML does not declare
        base, _, overload = name.partition(".")
        if defined(namespace_ops, base, overload or "default") is None:
            op_plugin_references.register(library, reference, namespace, helpers, define=True)
            loaded.referenced.append(name)
    return loaded


def _missing_kernel(qualname: str, kernel: str | None, path: str, line: int):
    what = f"its ACLNN kernel {kernel}" if kernel else "its kernel (a hand-written torch_npu adapter)"

    def missing(*args, **kwargs):
        raise NotImplementedError(
            f"{qualname} ({path}:{line}): {what} is torch_npu's, and simhpu has none. Provide one: declare "
            f"the operator in simhpu's own YAML with an exec: kernel (docs/own_ops.md), or register "
            f"a device kernel at run time with torch_simhpu.library.register_user_custom_op")
    return missing


def _simulated_aclnn(entry, path):
    """An official functional entry as a simulated ACLNN kernel (load_op_plugin's simulate_aclnn)."""
    if entry.schema.arguments.out or entry.schema.name.name.inplace:
        return None
    rules = readable_rules(entry)
    if rules is None:
        return None
    overload = entry.schema.name.overload_name or "default"
    aten_op = getattr(getattr(torch.ops.aten, str(entry.schema.name.name)), overload)
    where = f"aten::{entry.name} ({path}:{entry.line})"

    def to_cpu(value):
        if isinstance(value, torch.Tensor):
            return value.cpu()
        if isinstance(value, (list, tuple)):
            return type(value)(to_cpu(v) for v in value)
        return value

    def kernel(*args, **kwargs):
        from torch_simhpu.codegen.model.op_plugin_rules import RuleUnreadable

        values, device = rule_values(entry, args, kwargs)
        computed = aten_op(*to_cpu(args), **{k: to_cpu(v) for k, v in kwargs.items()})
        results = list(computed) if isinstance(computed, (list, tuple)) else [computed]
        try:
            wanted = list(expected(rules, values))
        except RuleUnreadable:  # a name only this call's arguments miss: ATen's outputs, unchecked
            wanted = [(tuple(r.shape), r.dtype) for r in results]
        outputs = []
        for index, ((shape, dtype), result) in enumerate(zip(wanted, results)):
            check_rule(where, index, shape, dtype, result, "ATen computes", "rule")
            outputs.append(torch.empty(shape, dtype=dtype, device=device).copy_(result))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
    return kernel


def _fake_kernel(entry):
    """The entry's outputs by its gen_opapi rules, when each return has a readable size and dtype rule."""
    rules = readable_rules(entry)
    return None if rules is None else fake_from_rules([a.name for a in entry.schema.arguments.flat_all], rules)


def op_plugin_kernels() -> dict[str, str]:
    """For a wheel built from op-plugin's own YAML: each of its operators and what serves it on simhpu.
    "simulated": an official entry run as a simulated ACLNN kernel (ATen's CPU kernel, its outputs
    checked against the entry's rules at every call); "own kernel": an official entry simhpu already
    has a device kernel for; "decomposes": an official entry ATen decomposes before any device
    kernel; "unprovided": a custom operator whose kernel is torch_npu's. Empty for simhpu's own YAML."""
    from torch_simhpu import _C

    return dict(_C._op_plugin_kernels())
