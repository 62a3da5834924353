"""Operator declarations from op_plugin_functions.yaml, validated."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from torchgen.model import FunctionSchema

from .errors import Problems, did_you_mean
from .rules import DTYPES, Rule, RuleError, parse_rule
from .yaml_loader import DuplicateKey, LineDict, load_yaml

ENTRY_KEYS = {"func", "exec", "out", "dtypes", "checks", "contiguous", "doc"}
REQUIRED_KEYS = ("func", "exec", "out", "dtypes")
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
    derivative: object = None  # torchgen DifferentiabilityInfo, attached by derivatives.py

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


def load_ops(path: str, kernels: dict[str, str], problems: Problems) -> Project:
    file = os.path.relpath(path)
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
    label = str(entry.get("func", "(entry without func)")).split("(")[0]
    errors_before = len(problems.items)

    def bad(key: str, message: str, fix: str = "") -> None:
        problems.add(file, entry.line_of(key), label, key, message, fix)

    for key in entry:
        if key not in ENTRY_KEYS:
            bad(key, "unknown field", did_you_mean(key, ENTRY_KEYS) or f"allowed fields: {', '.join(sorted(ENTRY_KEYS))}")
    for key in REQUIRED_KEYS:
        if key not in entry:
            problems.add(file, entry.line, label, key, "missing required field", f"add '{key}:' to the entry")
    if "func" not in entry:
        return None

    try:
        schema = FunctionSchema.parse(str(entry["func"]))
    except Exception as e:
        bad("func", f"schema does not parse: {e}", "write it in PyTorch's schema language, e.g. "
            "npu_op(Tensor x, float eps=1e-06) -> Tensor")
        return None
    name = str(schema.name)
    if (kind == "custom" and schema.name.name.inplace) or not schema.returns:
        bad("func", "a custom entry must be a functional op returning at least one Tensor",
            "declare the functional form; out= and in-place variants are derived from it")
        return None
    if kind == "custom" and not name.startswith("npu_"):
        bad("func", f"custom operator names start with 'npu_', got '{name}'", f"rename it to 'npu_{name}'")
    if any(str(r.type) != "Tensor" for r in schema.returns):
        bad("func", "every return must be a Tensor")

    arg_types = {a.name: str(a.type) for a in schema.arguments.flat_all}
    outs = output_names(schema)

    kernel, exec_args = "", []
    if "exec" in entry:
        parts = [p.strip() for p in str(entry["exec"]).split(",")]
        kernel, exec_args = parts[0], parts[1:]
        if not re.fullmatch(r"\w+", kernel):
            bad("exec", f"'{kernel}' is not a kernel name", "write 'exec: KERNEL, arg, ..., out'")
        elif kernel not in kernels:
            hint = did_you_mean(kernel, kernels)
            bad("exec", f"no kernel '{kernel}' is registered under csrc/kernels (SIMHPU_KERNEL({kernel}))",
                hint or f"add csrc/kernels/{kernel}.cpp, or run 'python -m codegen new-op'")
        for arg in exec_args:
            if arg not in arg_types and arg not in outs:
                hint = did_you_mean(arg, list(arg_types) + outs)
                bad("exec", f"'{arg}' is neither an argument nor an output of {name} (outputs: {', '.join(outs)})",
                    hint)
        for out in outs:
            if out not in exec_args:
                bad("exec", f"output '{out}' is not passed to the kernel", f"add '{out}' to the exec arguments")

    outputs = []
    if "out" in entry:
        rules = entry["out"]
        if len(outs) == 1 and isinstance(rules, LineDict) and set(rules) <= {"size", "dtype"}:
            rules = {outs[0]: rules}
        if not isinstance(rules, dict):
            bad("out", "expected {size: RULE, dtype: RULE}, or one such mapping per output")
            rules = {}
        for out in outs:
            if out not in rules:
                bad("out", f"no rule for output '{out}'", f"add '{out}: {{size: ..., dtype: ...}}'")
        for out, rule in rules.items():
            if out not in outs:
                bad("out", f"'{out}' is not an output of {name} (outputs: {', '.join(outs)})", did_you_mean(out, outs))
                continue
            if not isinstance(rule, dict) or set(rule) != {"size", "dtype"}:
                bad("out", f"output '{out}' needs exactly 'size' and 'dtype'")
                continue
            try:
                outputs.append(Output(out, parse_rule(rule["size"], "size", arg_types),
                                      parse_rule(rule["dtype"], "dtype", arg_types),
                                      f"size {rule['size']}, dtype {rule['dtype']}"))
            except RuleError as e:
                bad("out", f"output '{out}': {e}")

    dtypes = entry.get("dtypes") or []
    if "dtypes" in entry and not isinstance(dtypes, list):
        bad("dtypes", "expected a list of dtype names", "e.g. dtypes: [float32, float16]")
        dtypes = []
    for d in dtypes:
        if d not in DTYPES:
            bad("dtypes", f"unknown dtype '{d}'", did_you_mean(str(d), DTYPES) or f"use {', '.join(DTYPES)}")

    checks = []
    for text in entry.get("checks") or []:
        try:
            checks.append(parse_rule(text, "check", arg_types))
        except RuleError as e:
            bad("checks", str(e))

    contiguous = entry.get("contiguous", False)
    if not isinstance(contiguous, bool):
        bad("contiguous", f"expected true or false, got {contiguous!r}")

    if len(problems.items) != errors_before:
        return None
    return OpDecl(kind, schema, kernel, exec_args, outputs, [str(d) for d in dtypes], checks, contiguous,
                  " ".join(str(entry.get("doc", "")).split()), file, entry.line)
