"""Operators from op-plugin's dialect (implementations "aclnn" and "unprovided", see
codegen/op_plugin/translate.py): grouped translation units, and the Python that exposes them.

A dialect file holds about 1,500 operators, too many for a translation unit each on a two-core
machine; they are spread over GROUPS units by a hash of their name, so the group an operator
lands in never depends on the others, and editing, adding or removing one entry rewrites (and
recompiles) one unit."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from ..model.op_plugin_rules_cpp import render as render_rule
from ..model.operators import DIALECT_IMPLEMENTATIONS, Operator
from ..names import printable_label

GROUPS = 48


@dataclass(frozen=True)
class SimulatedView:
    op: Operator
    index: int  # its functions' prefix within the unit
    rules: tuple[tuple[str | None, str | None], ...]  # (size, dtype) as C++, a return; None: not checked

    @property
    def label(self) -> str:
        return printable_label(self.op.name, quote=False)


@dataclass(frozen=True)
class UnprovidedView:
    op: Operator
    schema: str
    tags: tuple[str, ...]

    @property
    def label(self) -> str:
        return printable_label(self.op.name, quote=False)


def dialect_ops(ops) -> list[Operator]:
    return [op for op in ops if op.implementation in DIALECT_IMPLEMENTATIONS]


def group_of(name: str) -> int:
    return zlib.crc32(name.encode()) % GROUPS


def _cpp_rules(op: Operator) -> tuple[tuple[str, str], ...]:
    arguments = frozenset(a.name for a in op.schema.arguments.flat_all)
    return tuple(tuple(render_rule(r, arguments) if r is not None else None for r in pair) for pair in op.rules)


def render(env, ops: list[Operator], namespace: str) -> dict[str, str]:
    groups: dict[int, tuple[list, list]] = {}
    for op in ops:
        simulated, unprovided = groups.setdefault(group_of(op.name), ([], []))
        if op.implementation == "aclnn":
            simulated.append(SimulatedView(op, len(simulated), _cpp_rules(op)))
        else:
            unprovided.append(UnprovidedView(op, str(op.schema), op.tags))
    template = env.get_template("op_plugin_group.cpp.j2")
    return {f"csrc/op_plugin_dialect/group_{g:02d}.cpp":
            template.render(group=g, groups=GROUPS, simulated=s, unprovided=u, namespace=namespace)
            for g, (s, u) in sorted(groups.items())}


def python_view(ops: list[Operator]) -> dict:
    """What the generated Python module (templates/op_plugin.py.j2) and the stub need: every text is a
    validated name, or written with repr()."""
    custom = [op for op in ops if op.implementation == "unprovided"]
    functions = sorted({str(op.schema.name.name) for op in custom if not str(op.schema.name.name).startswith("_")})
    fakes = [(repr(op.name), repr(tuple(a.name for a in op.schema.arguments.flat_all)), repr(op.rules))
             for op in custom if op.rules]
    kernels = {str(op.schema.name.name): (op.kernel, f"{op.file}:{op.line}") for op in custom}
    return dict(functions=functions, fakes=fakes,
                stubs=[(name, printable_label(f"{kernels[name][0] or 'a torch_npu adapter'} "
                                              f"({kernels[name][1]})", quote=False)) for name in functions])
