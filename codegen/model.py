"""Operator declarations from op_plugin_functions.yaml, validated."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from torchgen.model import FunctionSchema

from .elementwise import ElementwiseKernel, ExpressionError, translate
from .errors import Problems, did_you_mean
from .rules import DTYPES, Rule, RuleError, parse_rule
from .types import SUPPORTED_ARG_TYPES, base_type
from .yaml_loader import DuplicateKey, LineDict, load_yaml

ENTRY_KEYS = {"func", "exec", "elementwise", "composite", "out", "dtypes", "checks", "contiguous", "variants",
              "deprecated", "doc"}
# What implements the op: exactly one of these.
IMPLEMENTATIONS = ("exec", "elementwise", "composite")
# Further fields each implementation needs.
REQUIRED_KEYS = {"exec": ("out", "dtypes"), "elementwise": ("dtypes",), "composite": ()}
VARIANTS = ("out", "inplace")
TOP_KEYS = {"backend", "namespace", "official", "custom"}
KERNEL_REGISTRATION = re.compile(r"SIMHPU_KERNEL\(\s*(\w+)\s*\)")


@dataclass(frozen=True)
class Output:
    name: str
    size: Rule
    dtype: Rule
    text: str  # the rule as written, for docs


@dataclass
class OpDecl:
    kind: str  # "official" (an aten op run natively) or "custom" (a new npu op)
    schema: FunctionSchema
    kernel: str
    exec_args: list[str]
    outputs: list[Output]
    dtypes: list[str]
    checks: list[Rule]
    contiguous: bool
    doc: str
    file: str
    line: int
    elementwise: ElementwiseKernel | None = None  # codegen writes the kernel
    composite: str | None = None  # a C++ expression over other ops, instead of a kernel
    variants: tuple = ()  # "out" and/or "inplace", derived from this functional entry
    deprecated: str | None = None  # the operator to use instead
    derivative: object = None  # torchgen DifferentiabilityInfo, attached by derivatives.py
    aten_calls: set = field(default_factory=set)  # aten ops its formulas or composite expression call

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


@dataclass
class Project:
    backend: str
    namespace: str
    ops: list[OpDecl] = field(default_factory=list)

    @property
    def custom_ops(self) -> list[OpDecl]:
        return [op for op in self.ops if op.kind == "custom"]

    @property
    def official_ops(self) -> list[OpDecl]:
        return [op for op in self.ops if op.kind == "official"]


def registered_kernels(kernel_dir: str) -> dict[str, str]:
    """Kernel name -> file, for every SIMHPU_KERNEL(name) under kernel_dir."""
    kernels = {}
    for root, _, files in os.walk(kernel_dir):
        for name in sorted(files):
            if name.endswith(".cpp"):
                path = os.path.join(root, name)
                with open(path) as f:
                    for match in KERNEL_REGISTRATION.finditer(f.read()):
                        kernels[match.group(1)] = path
    return kernels


def output_names(schema: FunctionSchema) -> list[str]:
    names = [r.name for r in schema.returns]
    if len(names) == 1:
        return [names[0] or "out"]
    return [n or f"out{i}" for i, n in enumerate(names)]


def load_ops(path: str, kernels: dict[str, str], problems: Problems, root: str = ".") -> Project:
    file = os.path.relpath(path, root)
    with open(path) as f:
        text = f.read()
    try:
        doc = load_yaml(text)
    except DuplicateKey as e:
        problems.add(file, e.line, "(file)", e.key, str(e), "remove one of the two")
        return Project("simhpu", "npu")
    except Exception as e:  # yaml.YAMLError
        mark = getattr(e, "problem_mark", None)
        problems.add(file, mark.line + 1 if mark else 1, "(file)", "", f"not valid YAML: {getattr(e, 'problem', e)}",
                     "fix the YAML syntax")
        return Project("simhpu", "npu")
    if not isinstance(doc, LineDict):
        problems.add(file, 1, "(file)", "", "expected a mapping with 'backend', 'namespace', 'official' and 'custom'")
        return Project("simhpu", "npu")

    for key in doc:
        if key not in TOP_KEYS:
            problems.add(file, doc.line_of(key), "(file)", key, "unknown top-level key",
                         did_you_mean(key, TOP_KEYS) or f"use one of {sorted(TOP_KEYS)}")
    project = Project(str(doc.get("backend", "simhpu")), str(doc.get("namespace", "npu")))
    seen: dict[str, int] = {}
    for kind in ("official", "custom"):
        entries = doc.get(kind) or []
        if not isinstance(entries, list):
            problems.add(file, doc.line_of(kind), "(file)", kind, "expected a list of operator entries")
            continue
        for entry in entries:
            op = _load_entry(entry, kind, file, kernels, problems)
            if op is None:
                continue
            if op.name in seen:
                problems.add(file, op.line, op.name, "func", f"operator declared twice (first at line {seen[op.name]})",
                             "remove or rename one of the entries")
                continue
            seen[op.name] = op.line
            project.ops.append(op)
    return project


def _load_entry(entry, kind: str, file: str, kernels: dict[str, str], problems: Problems) -> OpDecl | None:
    if not isinstance(entry, LineDict):
        problems.add(file, 1, f"({kind} entry)", "", "expected a mapping with func, exec, out and dtypes")
        return None
    return _EntryLoader(entry, kind, file, kernels, problems).load()


class _EntryLoader:
    """Reads one entry field by field, reporting every problem it finds."""

    def __init__(self, entry: LineDict, kind: str, file: str, kernels: dict[str, str], problems: Problems):
        self.entry, self.kind, self.file, self.kernels, self.problems = entry, kind, file, kernels, problems
        self.label = str(entry["func"]).split("(")[0] if "func" in entry else "(entry without func)"

    def bad(self, key: str, message: str, fix: str = "") -> None:
        line = self.entry.line_of(key) if key in self.entry else self.entry.line
        self.problems.add(self.file, line, self.label, key, message, fix)

    def load(self) -> OpDecl | None:
        errors_before = len(self.problems.items)
        entry = self.entry
        for key in entry:
            if key not in ENTRY_KEYS:
                self.bad(key, "unknown field",
                         did_you_mean(key, ENTRY_KEYS) or f"allowed fields: {', '.join(sorted(ENTRY_KEYS))}")
        if "func" not in entry:
            self.bad("func", "missing required field", "add 'func:' with the operator's schema")
            return None
        implementation = self._implementation()
        schema = self._schema()
        if schema is None or implementation is None:
            return None
        for key in REQUIRED_KEYS[implementation]:
            if key not in entry:
                self.bad(key, "missing required field", f"add '{key}:' to the entry")

        self.arg_types = {a.name: str(a.type) for a in schema.arguments.flat_all}
        self.outs = output_names(schema)
        kernel, exec_args, elementwise = "", [], None
        if implementation == "exec":
            kernel, exec_args = self._exec()
        elif implementation == "elementwise":
            elementwise = self._elementwise()
            if elementwise is not None:
                kernel = f"{schema.name.name.base}_elementwise"
                exec_args = [*elementwise.tensors, *(n for n, _ in elementwise.numbers), *self.outs]
        outputs = self._outputs(elementwise)
        dtypes = self._dtypes()
        checks = self._checks()
        contiguous = entry.get("contiguous", False)
        if not isinstance(contiguous, bool):
            self.bad("contiguous", f"expected true or false, got {contiguous!r}")
        variants = self._variants(schema, outputs)
        deprecated = entry.get("deprecated")
        if deprecated is not None and not re.fullmatch(r"npu_\w+", str(deprecated)):
            self.bad("deprecated", f"expected the name of the operator to use instead, got {deprecated!r}",
                     "e.g. deprecated: npu_new_name")

        if len(self.problems.items) != errors_before:
            return None
        return OpDecl(self.kind, schema, kernel, exec_args, outputs, [str(d) for d in dtypes], checks, contiguous,
                      " ".join(str(entry.get("doc", "")).split()), self.file, entry.line,
                      elementwise=elementwise,
                      composite=str(entry["composite"]).strip() if implementation == "composite" else None,
                      variants=variants, deprecated=None if deprecated is None else str(deprecated))

    def _implementation(self) -> str | None:
        given = [k for k in IMPLEMENTATIONS if k in self.entry]
        if len(given) == 1:
            if self.kind == "official" and given[0] != "exec":
                self.bad(given[0], "official aten ops run a kernel from csrc/kernels", "use 'exec:'")
                return None
            return given[0]
        if not given:
            self.bad("exec", "missing required field",
                     "add 'exec: KERNEL, args..., out', 'elementwise: EXPRESSION' or 'composite: EXPRESSION'")
        else:
            self.bad(given[1], f"'{given[0]}' and '{given[1]}' both implement the op", "keep one of them")
        return None

    def _schema(self) -> FunctionSchema | None:
        try:
            schema = FunctionSchema.parse(str(self.entry["func"]))
        except Exception as e:
            self.bad("func", f"schema does not parse: {e}", "write it in PyTorch's schema language, e.g. "
                     "npu_op(Tensor x, float eps=1e-06) -> Tensor")
            return None
        name = str(schema.name)
        if self.kind == "custom":
            if schema.name.name.inplace or schema.is_out_fn() or schema.name.overload_name:
                self.bad("func", "custom entries declare the functional form, without overload name",
                         "declare 'npu_op(...) -> Tensor'; list out= and in-place forms under 'variants:'")
                return None
            if not name.startswith("npu_"):
                self.bad("func", f"custom operator names start with 'npu_', got '{name}'", f"rename it to 'npu_{name}'")
                return None
        if not schema.returns or any(str(r.type) != "Tensor" for r in schema.returns):
            self.bad("func", "every return must be a Tensor (and there must be at least one)")
            return None
        for a in schema.arguments.flat_all:
            if base_type(a.type) not in SUPPORTED_ARG_TYPES:
                self.bad("func", f"argument '{a.name}' has type {a.type}, which device ops do not take",
                         f"use one of {', '.join(SUPPORTED_ARG_TYPES)}")
                return None
        if not any(str(a.type) == "Tensor" for a in schema.arguments.flat_all):
            self.bad("func", "the op needs at least one Tensor argument (it decides the device)")
            return None
        return schema

    def _exec(self) -> tuple[str, list[str]]:
        parts = [p.strip() for p in str(self.entry["exec"]).split(",")]
        kernel, exec_args = parts[0], parts[1:]
        if not re.fullmatch(r"\w+", kernel):
            self.bad("exec", f"'{kernel}' is not a kernel name", "write 'exec: KERNEL, arg, ..., out'")
        elif kernel not in self.kernels:
            hint = did_you_mean(kernel, self.kernels)
            self.bad("exec", f"no kernel '{kernel}' is registered under csrc/kernels (SIMHPU_KERNEL({kernel}))",
                     hint or f"add csrc/kernels/{kernel}.cpp, or run 'python -m codegen new-op'")
        for arg in exec_args:
            if arg not in self.arg_types and arg not in self.outs:
                hint = did_you_mean(arg, list(self.arg_types) + self.outs)
                self.bad("exec", f"'{arg}' is neither an argument nor an output of {self.label} "
                                 f"(outputs: {', '.join(self.outs)})", hint)
        for out in self.outs:
            if out not in exec_args:
                self.bad("exec", f"output '{out}' is not passed to the kernel", f"add '{out}' to the exec arguments")
        return kernel, exec_args

    def _elementwise(self) -> ElementwiseKernel | None:
        if len(self.outs) != 1:
            self.bad("elementwise", "an elementwise op has exactly one output")
            return None
        try:
            return translate(self.entry["elementwise"], self.arg_types)
        except ExpressionError as e:
            self.bad("elementwise", str(e))
            return None

    def _outputs(self, elementwise: ElementwiseKernel | None) -> list[Output]:
        if "out" not in self.entry:
            if elementwise is None:
                return []
            tensors = elementwise.tensors
            size = f"broadcast({', '.join(tensors)})" if len(tensors) > 1 else tensors[0]
            dtype = f"promote({', '.join(tensors)})" if len(tensors) > 1 else tensors[0]
            rules = {self.outs[0]: {"size": size, "dtype": dtype}}
        else:
            rules = self.entry["out"]
            if len(self.outs) == 1 and isinstance(rules, LineDict) and set(rules) <= {"size", "dtype"}:
                rules = {self.outs[0]: rules}
        if not isinstance(rules, dict):
            self.bad("out", "expected {size: RULE, dtype: RULE}, or one such mapping per output")
            return []
        outputs = []
        for out in self.outs:
            if out not in rules:
                self.bad("out", f"no rule for output '{out}'", f"add '{out}: {{size: ..., dtype: ...}}'")
        for out, rule in rules.items():
            if out not in self.outs:
                self.bad("out", f"'{out}' is not an output of {self.label} (outputs: {', '.join(self.outs)})",
                         did_you_mean(out, self.outs))
                continue
            if not isinstance(rule, dict) or set(rule) != {"size", "dtype"}:
                self.bad("out", f"output '{out}' needs exactly 'size' and 'dtype'")
                continue
            try:
                outputs.append(Output(out, parse_rule(rule["size"], "size", self.arg_types),
                                      parse_rule(rule["dtype"], "dtype", self.arg_types),
                                      f"size {rule['size']}, dtype {rule['dtype']}"))
            except RuleError as e:
                self.bad("out", f"output '{out}': {e}")
        return outputs

    def _dtypes(self) -> list:
        dtypes = self.entry.get("dtypes") or []
        if not isinstance(dtypes, list):
            self.bad("dtypes", "expected a list of dtype names", "e.g. dtypes: [float32, float16]")
            return []
        for d in dtypes:
            if d not in DTYPES:
                self.bad("dtypes", f"unknown dtype '{d}'", did_you_mean(str(d), DTYPES) or f"use {', '.join(DTYPES)}")
        return dtypes

    def _checks(self) -> list[Rule]:
        checks = []
        for text in self.entry.get("checks") or []:
            try:
                checks.append(parse_rule(text, "check", self.arg_types))
            except RuleError as e:
                self.bad("checks", str(e))
        return checks

    def _variants(self, schema: FunctionSchema, outputs: list[Output]) -> tuple:
        variants = self.entry.get("variants") or []
        if not isinstance(variants, list):
            self.bad("variants", "expected a list", "e.g. variants: [out, inplace]")
            return ()
        for v in variants:
            if v not in VARIANTS:
                self.bad("variants", f"unknown variant '{v}'", did_you_mean(str(v), VARIANTS) or "use out or inplace")
        if "composite" in self.entry and variants:
            self.bad("variants", "composite ops have no out= or in-place variants")
        if "inplace" in variants:
            first = schema.arguments.flat_positional[0] if schema.arguments.flat_positional else None
            if first is None or first.name != "self" or str(first.type) != "Tensor" or len(outputs) != 1:
                self.bad("variants", "an in-place variant writes its single output into a first argument "
                                     "'Tensor self'", "name the first argument self, or drop 'inplace'")
        return tuple(v for v in VARIANTS if v in variants)

