"""Device kernels: the ones elementwise entries generate, and the header that
checks every exec: entry against its kernel's parameters at compile time."""
from __future__ import annotations

from dataclasses import dataclass

from .api import OpView
from ..model.kernel_signatures import param_types_accepting


@dataclass(frozen=True)
class ExecEntry:
    accepted: tuple[tuple[str, ...], ...]  # per argument passed: the kernel parameter types that take it
    message: str


@dataclass(frozen=True)
class KernelEntries:
    name: str
    entries: tuple[ExecEntry, ...]


def exec_entries(views: list[OpView], kernel_names) -> list[KernelEntries]:
    """Every registered kernel with the exec: entries that launch it."""
    by_kernel: dict[str, list[ExecEntry]] = {name: [] for name in kernel_names}
    for v in views:
        if v.op.implementation not in ("exec", "elementwise"):
            continue
        types = {a.name: str(a.type) for a in v.op.schema.arguments.flat_all}
        outputs = {o.name for o in v.op.outputs}
        accepted = tuple(tuple(param_types_accepting(types.get(a, "Tensor"), output=a in outputs))
                         for a in v.op.exec_args)
        message = f"{v.op.file}:{v.op.line} ({v.name}): exec: arguments do not fit the kernel"
        by_kernel.setdefault(v.op.kernel, []).append(ExecEntry(accepted, message))
    return [KernelEntries(name, tuple(entries)) for name, entries in sorted(by_kernel.items())]


def render(env, views: list[OpView], kernel_names) -> dict[str, str]:
    # One header per kernel: adding an entry recompiles only the file of the kernel it launches.
    signatures = env.get_template("kernel_signatures.h.j2")
    files = {f"include/generated/kernel_signatures/{k.name}.h": signatures.render(k=k)
             for k in exec_entries(views, kernel_names)}
    template = env.get_template("kernel.cpp.j2")
    for v in views:
        if v.elementwise:
            files[f"csrc/kernels/{v.elementwise.kernel}.cpp"] = template.render(v=v, e=v.elementwise)
    return files
