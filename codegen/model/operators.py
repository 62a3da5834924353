"""The typed model of a project: the operators every front end (simhpu's YAML, op-plugin's
dialect, derivatives.yaml) fills and every back end (dest/) reads."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from torchgen.model import FunctionSchema

from ..target import Target
from .elementwise import ElementwiseKernel
from .rules import Rule

# What implements an op from simhpu's YAML: exactly one of these.
IMPLEMENTATIONS = ("exec", "elementwise", "composite", "adapter")
# Operators read from op-plugin's dialect: an official entry whose gen_opapi rules run as a simulated
# ACLNN kernel (ATen's CPU kernel, its outputs checked against the rules), and a custom entry whose
# kernel is torch_npu's (a callable name that raises NotImplementedError).
DIALECT_IMPLEMENTATIONS = ("aclnn", "unprovided")
KERNEL_REGISTRATION = re.compile(r"SIMHPU_KERNEL\(\s*(\w+)\s*\)")
OP_PLUGIN_REGISTRATION = re.compile(r"SIMHPU_OP_PLUGIN\(\s*(\w+)\s*\)")


@dataclass(frozen=True)
class Output:
    name: str
    size: Rule
    dtype: Rule
    text: str  # the rule as written, for docs


@dataclass(frozen=True)
class Cost:
    """`cost:` — what simulated time prices the kernel by, as C++ over the launch's arguments."""
    work: str  # "vector" or "matrix"
    flops: str | None  # C++ expressions rendered from their parse; None: worked out from the operands
    bytes: str | None


COST_WORK = ("vector", "matrix")
# What a cost expression may ask of a tensor: its sizes, nothing that computes.
COST_MEMBERS = frozenset({"size", "numel", "dim"})


@dataclass(frozen=True)
class Operator:
    """One entry of op_plugin_functions.yaml, validated. Built once, by
    project.load_project, with its derivative and calls; never changed after."""
    kind: str  # "official" (an aten op run natively) or "custom" (a new npu op)
    # "exec", "elementwise", "composite" or "adapter" (see IMPLEMENTATIONS); from op-plugin's dialect
    # (codegen/op_plugin/translate.py), "aclnn" or "unprovided" (see DIALECT_IMPLEMENTATIONS)
    implementation: str
    schema: FunctionSchema
    kernel: str  # the device kernel launched ("" for composite and adapter ops)
    exec_args: tuple[str, ...]
    outputs: tuple[Output, ...]
    dtypes: tuple[str, ...]
    checks: tuple[Rule, ...]
    contiguous: bool
    doc: str
    file: str
    line: int
    elementwise: ElementwiseKernel | None = None  # codegen writes the kernel
    composite: str | None = None  # as written; its C++ is `composite_cpp`
    adapter: str | None = None  # a hand-written launch in op_plugin/
    variants: tuple[str, ...] = ()  # "out" and/or "inplace", derived from this functional entry
    deprecated: str | None = None  # the operator to use instead
    composite_line: int = 0  # where the composite expression is written
    reference: str | None = None  # a Python expression the generated tests compare with (codegen/simhpu_yaml/reference.py)
    samples: tuple = ()  # inputs the generated tests try: {argument: shape or value}
    cost: Cost | None = None  # how simulated time prices its kernel (codegen/templates/cost_hint.j2)
    tags: tuple[str, ...] = ()  # schema tags (torch.Tag names), from op-plugin's dialect
    rules: tuple = ()  # op-plugin's output rules, parsed (codegen/model/op_plugin_rules.py): (size, dtype) a return
    # Filled in by project.load_project from the other passes' results:
    composite_cpp: str | None = None  # the composite expression rendered from its parse
    derivative: object = None  # torchgen DifferentiabilityInfo from derivatives.yaml
    aten_calls: frozenset[str] = frozenset()  # aten ops its formulas or composite expression call
    npu_calls: frozenset[str] = frozenset()  # the project's operators they call (by C++ name)

    @property
    def name(self) -> str:
        """The schema name, e.g. npu_rms_norm or add.Tensor."""
        return str(self.schema.name)

    @property
    def cpp_name(self) -> str:
        """A C++ identifier for the op, e.g. npu_rms_norm or add_Tensor."""
        return self.name.replace(".", "_")

    @property
    def tensor_args(self) -> list[str]:
        return [a.name for a in self.schema.arguments.flat_all if str(a.type).rstrip("?") == "Tensor"]


@dataclass(frozen=True)
class Project:
    backend: str
    namespace: str
    ops: tuple[Operator, ...] = ()
    rejected: frozenset[str] = frozenset()  # names of entries with problems (derivatives skip them)
    readable: bool = True  # False when the file itself could not be read: every operator is unknown
    kernel_names: tuple[str, ...] = ()  # every kernel registered under csrc/kernels
    adapter_names: tuple[str, ...] = ()  # every adapter registered under op_plugin/
    target: Target | None = None  # what is being built (codegen/target.py): the backend or a package
    stubs: tuple = ()  # official entries served through a dispatch stub (codegen/simhpu_yaml/stubs.py)

    @property
    def custom_ops(self) -> list[Operator]:
        return [op for op in self.ops if op.kind == "custom"]

    @property
    def official_ops(self) -> list[Operator]:
        return [op for op in self.ops if op.kind == "official"]


def registered_names(folder: str, registration: re.Pattern = KERNEL_REGISTRATION) -> dict[str, str]:
    """Name -> file, for every registration (SIMHPU_KERNEL(name) by default) in the .cpp files under folder."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(".cpp"):
                path = os.path.join(root, name)
                with open(path) as f:
                    for match in registration.finditer(f.read()):
                        found[match.group(1)] = path
    return found


def output_names(schema: FunctionSchema) -> list[str]:
    names = [r.name for r in schema.returns]
    if len(names) == 1:
        return [names[0] or "out"]
    return [n or f"out{i}" for i, n in enumerate(names)]
