"""simhpu's own front end: operator declarations from op_plugin_functions.yaml, validated
into the model (codegen/model/operators.py)."""
from __future__ import annotations

import ast
import os
import re

from torchgen.model import FunctionSchema

from ..errors import Problems, did_you_mean
from ..model import kernel_signatures
from ..model.cpp_expr import ExpressionError as CppExpressionError, Scope, parse
from ..model.elementwise import ElementwiseKernel, ExpressionError, translate
from ..model.operators import COST_MEMBERS, COST_WORK, IMPLEMENTATIONS, Cost, Operator, Output, Project, output_names
from ..model.rules import DTYPES, Rule, RuleError, dimension_out_of_range, parse_rule
from ..model.types import SUPPORTED_ARG_TYPES, base_type, check_default
from ..names import check_identifier, check_namespace, check_text, printable_label
from ..target import Target
from ..yaml_loader import LineDict, entry_list, load_yaml_file
from .reference import check_reference, check_samples
from .stubs import load_stub_entry

ENTRY_KEYS = {"func", "exec", "elementwise", "composite", "adapter", "out", "dtypes", "checks", "contiguous",
              "variants", "deprecated", "doc", "reference", "samples", "cost", "tags"}
# Further fields each implementation needs.
REQUIRED_KEYS = {"exec": ("out", "dtypes"), "elementwise": ("dtypes",), "composite": (), "adapter": ("out", "dtypes")}
VARIANTS = ("out", "inplace")
TOP_KEYS = {"backend", "namespace", "official", "custom"}


def load_ops(path: str, kernels: dict[str, str], problems: Problems, root: str = ".",
             op_plugins: dict[str, str] | None = None, target: Target | None = None,
             stub_kernels: dict[str, str] | None = None) -> Project:
    """The validated entries of the ops file; `kernels`, `op_plugins` and
    `stub_kernels` map the names registered under csrc/kernels and op_plugin/
    to their files."""
    file = os.path.relpath(path, root)
    doc = load_yaml_file(path, file, problems, empty=LineDict())
    if doc is None or not isinstance(doc, LineDict):
        if doc is not None:
            problems.add(file, getattr(doc, "line", 1), "(file)", "",
                         "expected a mapping with 'backend', 'namespace', 'official' and 'custom'",
                         "start the file with 'backend: simhpu' and 'namespace: npu'")
        return Project("simhpu", "npu", readable=False, target=target)

    for key in doc:
        if key not in TOP_KEYS:
            problems.add(file, doc.line_of(key), "(file)", key, "unknown top-level key",
                         did_you_mean(key, TOP_KEYS) or f"use one of {sorted(TOP_KEYS)}")
    settings = {"backend": "simhpu", "namespace": "npu"}
    for key, check in (("backend", _check_backend), ("namespace", check_namespace)):
        if key in doc:
            message = check(doc[key])
            if message:
                problems.add(file, doc.line_of(key), "(file)", key, message[0], message[1])
            else:
                settings[key] = doc[key]
    ops: list[Operator] = []
    rejected: set[str] = set()
    seen: dict[str, int] = {}
    stub_entries: list[LineDict] = []
    for kind in ("official", "custom"):
        entries = entry_list(doc, kind, file, problems)
        if entries is None:
            continue
        if kind == "official" and entries and target is not None and not target.in_tree:
            problems.add(file, doc.line_of(kind), "(file)", kind,
                         "an operator package cannot give aten operators device kernels: torch_simhpu owns "
                         "aten's PrivateUse1 registrations",
                         "declare new operators under 'custom:' (or propose the aten kernel to torch_simhpu)")
            continue
        for index, entry in enumerate(entries):
            if kind == "official" and isinstance(entry, LineDict) and "stub" in entry:
                stub_entries.append(entry)  # once every exec entry is known (see below)
                continue
            op = _load_entry(entry, entries.line_at(index), kind, file, kernels, op_plugins or {}, problems, root)
            if op is None:
                if isinstance(entry, LineDict) and isinstance(entry.get("func"), str):
                    rejected.add(entry["func"].split("(")[0].strip())
                continue
            if op.name in seen:
                problems.add(file, op.line, op.name, "func", f"operator declared twice (first at line {seen[op.name]})",
                             "remove or rename one of the entries")
                continue
            seen[op.name] = op.line
            ops.append(op)
    registered = {f"aten::{op.name}" for op in ops if op.kind == "official"}
    stubs = []
    for entry in stub_entries:
        stub = load_stub_entry(entry, file, problems, stub_kernels or {}, registered)
        if stub is not None:
            if stub.name in seen:
                problems.add(file, entry.line, stub.name, "func",
                             f"operator declared twice (first at line {seen[stub.name]})", "remove one of the entries")
                continue
            seen[stub.name] = entry.line
            registered |= {f"aten::{r.name}" for r in stub.registrations}
            stubs.append(stub)
    project = Project(settings["backend"], settings["namespace"], tuple(ops), frozenset(rejected), target=target,
                      stubs=tuple(stubs))
    _check_deprecations(project, problems)
    return project


def _check_backend(value):
    if value != "simhpu":
        return (f"the backend is the device this package builds for, 'simhpu'; got {printable_label(value)}",
                "write 'backend: simhpu'")
    return None


def _check_deprecations(project: Project, problems: Problems) -> None:
    names = {op.name for op in project.ops} | project.rejected
    for op in project.ops:
        if op.deprecated is None:
            continue
        if op.deprecated not in names:
            problems.add(op.file, op.line, op.name, "deprecated",
                         f"names '{op.deprecated}' as the operator to use instead, but no such operator is declared",
                         did_you_mean(op.deprecated, names) or "name a declared npu_* operator")
        elif op.deprecated == op.name:
            problems.add(op.file, op.line, op.name, "deprecated", "names the operator itself as its replacement",
                         "name the operator to use instead")


def _load_entry(entry, line: int, kind: str, file: str, kernels: dict[str, str], op_plugins: dict[str, str],
                problems: Problems, root: str) -> Operator | None:
    if not isinstance(entry, LineDict):
        problems.add(file, line, f"({kind} entry)", "", f"expected a mapping with func, exec, out and dtypes, got "
                     f"{type(entry).__name__} {printable_label(entry)}",
                     "write the entry as '- func: ...' followed by its fields, indented under it")
        return None
    return _EntryLoader(entry, kind, file, kernels, op_plugins, problems, root).load()


class _EntryLoader:
    """Reads one entry field by field, reporting every problem it finds."""

    def __init__(self, entry: LineDict, kind: str, file: str, kernels: dict[str, str], op_plugins: dict[str, str],
                 problems: Problems, root: str):
        self.entry, self.kind, self.file, self.problems, self.root = entry, kind, file, problems, root
        self.kernels, self.op_plugins = kernels, op_plugins
        self.label = (printable_label(str(entry["func"]).split("(")[0].strip(), quote=False) if "func" in entry
                      else "(entry without func)")

    def bad(self, key: str, message: str, fix: str) -> None:
        line = self.entry.line_of(key) if key in self.entry else self.entry.line
        self.problems.add(self.file, line, self.label, key, message, fix)

    def load(self) -> Operator | None:
        errors_before = len(self.problems.items)
        entry = self.entry
        for key in entry:
            if key not in ENTRY_KEYS:
                self.bad(key, "unknown field",
                         did_you_mean(key, ENTRY_KEYS) or f"allowed fields: {', '.join(sorted(ENTRY_KEYS))}")
        # Fields that do not depend on the schema are checked even when it is wrong,
        # so one run reports every problem of the entry.
        dtypes = self._dtypes()
        contiguous = entry.get("contiguous", False)
        if not isinstance(contiguous, bool):
            self.bad("contiguous", f"expected true or false, got {printable_label(contiguous)}",
                     "write 'contiguous: true' or leave the field out")
        deprecated = self._deprecated()
        doc = self._doc()
        variant_names = self._variant_names()
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
            self._dtypes_fit_kernel(kernel, dtypes)
        elif implementation == "elementwise":
            elementwise = self._elementwise()
            if elementwise is not None:
                kernel = f"{schema.name.name.base}_elementwise"
                exec_args = [*elementwise.tensors, *(n for n, _ in elementwise.numbers), *self.outs]
        adapter = self._adapter() if implementation == "adapter" else None
        composite = None
        if implementation == "composite":
            composite = entry["composite"]
            if not isinstance(composite, str):
                self.bad("composite", f"expected a C++ expression as text, got {printable_label(composite)}",
                         "quote the expression")
        outputs = self._outputs(elementwise)
        checks = self._checks()
        variants = self._variants(schema, outputs, variant_names)
        reference, samples = self._reference()
        self._dimensions_fit_samples(outputs, checks, samples)
        cost = self._cost(implementation)
        tags = self._tags()

        if len(self.problems.items) != errors_before:
            return None
        return Operator(self.kind, implementation, schema, kernel, tuple(exec_args), tuple(outputs), tuple(dtypes),
                        tuple(checks), contiguous, " ".join(doc.split()), self.file, entry.line,
                        elementwise=elementwise,
                        composite=composite.strip() if composite is not None else None,
                        adapter=adapter, variants=variants, deprecated=deprecated,
                        composite_line=entry.line_of("composite"), reference=reference, samples=samples,
                        cost=cost, tags=tags)

    def _tags(self) -> tuple[str, ...]:
        """`tags:` — schema tags of a custom operator (torch.Tag names, as native_functions.yaml's)."""
        tags = self.entry.get("tags")
        if tags is None:
            return ()
        tags = [tags] if isinstance(tags, str) else tags
        if self.kind != "custom":
            self.bad("tags", "an official operator carries aten's own tags", "remove 'tags:'")
            return ()
        import torch

        known = sorted(torch.Tag.__members__)
        if not isinstance(tags, list) or not tags:
            self.bad("tags", f"expected a list of tag names, got {printable_label(tags)}",
                     "e.g. tags: [nondeterministic_seeded]")
            return ()
        for tag in tags:
            if not isinstance(tag, str) or tag not in known:
                self.bad("tags", f"{printable_label(tag)} is not a tag of this torch (torch.Tag)",
                         did_you_mean(str(tag), known) or f"use one of {', '.join(known)}")
                return ()
        if len(set(tags)) != len(tags):
            self.bad("tags", "a tag is listed twice", "list each tag once")
            return ()
        return tuple(tags)

    def _dtypes_fit_kernel(self, kernel: str, dtypes: list[str]) -> None:
        """A dtype the kernel's dispatch macro does not instantiate would build, then fail when called."""
        if kernel not in self.kernels:
            return
        dispatched = kernel_signatures.dispatched_dtypes(kernel, self.kernels[kernel])
        if dispatched is None:  # no dispatch macro this reader knows: nothing to compare
            return
        missing = [d for d in dtypes if d not in dispatched]
        if missing:
            self.bad("dtypes", f"kernel '{kernel}' dispatches on {', '.join(sorted(dispatched))}, not on "
                               f"{', '.join(missing)}",
                     f"remove {', '.join(missing)} from dtypes, or widen the kernel's dispatch macro")

    def _adapter(self) -> str | None:
        """The hand-written launch in op_plugin/ that `adapter:` names."""
        name = self.entry["adapter"]
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name):
            self.bad("adapter", f"expected the name of a function in op_plugin/, got {printable_label(name)}",
                     "write 'adapter: NAME' and define NAME in op_plugin/NAME.cpp")
            return None
        if name not in self.op_plugins:
            self.bad("adapter", f"no adapter '{name}' is registered under op_plugin/ (SIMHPU_OP_PLUGIN({name}))",
                     did_you_mean(name, self.op_plugins) or f"define it in op_plugin/{name}.cpp and register it "
                     f"with SIMHPU_OP_PLUGIN({name})")
            return None
        return name

    def _deprecated(self) -> str | None:
        deprecated = self.entry.get("deprecated")
        if deprecated is not None and not (isinstance(deprecated, str) and re.fullmatch(r"npu_[a-z0-9_]{1,60}",
                                                                                       deprecated)):
            self.bad("deprecated", f"expected the name of the operator to use instead, got "
                     f"{printable_label(deprecated)}", "e.g. deprecated: npu_new_name")
            return None
        return deprecated

    def _doc(self) -> str:
        doc = self.entry.get("doc", "")
        problem = check_text(doc, "the doc")
        if problem:
            self.bad("doc", *problem)
            return ""
        return doc

    def _implementation(self) -> str | None:
        given = [k for k in IMPLEMENTATIONS if k in self.entry]
        if len(given) == 1:
            if self.kind == "official" and given[0] != "exec":
                self.bad(given[0], "official aten ops run a kernel from csrc/kernels", "use 'exec:'")
                return None
            return given[0]
        if not given:
            self.bad("exec", "missing required field",
                     "add 'exec: KERNEL, args..., out', 'elementwise: EXPRESSION', 'composite: EXPRESSION' "
                     "or 'adapter: NAME'")
        else:
            self.bad(given[1], f"'{given[0]}' and '{given[1]}' both implement the op", "keep one of them")
        return None

    def _schema(self) -> FunctionSchema | None:
        text = self.entry["func"]
        problem = check_text(text, "the schema", limit=1000)
        if problem is None and ("\n" in text or "\t" in text):
            problem = ("the schema spans several lines", "write the schema on one line")
        if problem is None and not text.isascii():
            problem = ("the schema holds characters other than ASCII", "write names and types in ASCII")
        if problem:
            self.bad("func", *problem)
            return None
        try:
            schema = FunctionSchema.parse(text)
        except Exception as e:  # torchgen reports schema mistakes as assorted exceptions
            reason = printable_label(str(e).split("\n")[0], limit=200, quote=False)
            self.bad("func", f"schema does not parse: {reason}", "write it in PyTorch's schema language, e.g. "
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
            problem = check_identifier(name, "operator name", allow_generated=True)
            if problem:
                self.bad("func", *problem)
                return None
            if any(a.annotation for a in schema.arguments.flat_all) or any(r.annotation for r in schema.returns):
                self.bad("func", "custom entries are functional: no alias annotations such as Tensor(a!)",
                         "declare plain Tensor arguments; list out= and in-place forms under 'variants:'")
                return None
        if not schema.returns or any(str(r.type) != "Tensor" for r in schema.returns):
            self.bad("func", "every return must be a Tensor (and there must be at least one)",
                     "return Tensor, or a tuple of Tensors: -> (Tensor a, Tensor b)")
            return None
        ok = self._names(schema)
        for a in schema.arguments.flat_all:
            if base_type(a.type) not in SUPPORTED_ARG_TYPES:
                self.bad("func", f"argument '{a.name}' has type {a.type}, which device ops do not take",
                         f"use one of {', '.join(SUPPORTED_ARG_TYPES)}")
                ok = False
                continue
            problem = check_default(a)
            if problem:
                self.bad("func", *problem)
                ok = False
        if not any(str(a.type) == "Tensor" for a in schema.arguments.flat_all):
            self.bad("func", "the op needs at least one Tensor argument (it decides the device)",
                     "add a Tensor argument")
            return None
        if ok and self.kind == "official":
            ok = self._official(schema)
        return schema if ok else None

    def _names(self, schema: FunctionSchema) -> bool:
        """Arguments and returns have distinct names the generated code can use."""
        ok, seen = True, set()
        named = [("argument", a.name) for a in schema.arguments.flat_all]
        named += [("output", n) for n in output_names(schema) if n not in ("out",) or len(schema.returns) != 1]
        for what, name in named:
            problem = check_identifier(name, f"{what} name")
            if problem:
                self.bad("func", *problem)
                ok = False
            elif name in seen:
                self.bad("func", f"the name '{name}' is used twice among the arguments and outputs",
                         "give each argument and output a name of its own")
                ok = False
            seen.add(name)
        return ok

    def _official(self, schema: FunctionSchema) -> bool:
        """An official entry is an existing functional aten op, declared exactly as aten does."""
        if schema.name.name.inplace or schema.is_out_fn() or any(a.annotation for a in schema.arguments.flat_all):
            self.bad("func", "official entries run functional aten ops (a new output per call); in-place and out= "
                     "forms are served from the functional one's kernel by PyTorch",
                     "declare the functional overload, e.g. add.Tensor")
            return False
        aten = {s.overload_name: str(s).removeprefix("aten::")
                for s in _aten_schemas(str(schema.name.name))}
        overload = schema.name.overload_name
        if overload not in aten:
            known = ", ".join(f"{schema.name.name}{'.' + o if o else ''}" for o in aten) or "none"
            self.bad("func", f"'{schema.name}' is not an aten operator (aten overloads of that name: {known})",
                     "copy the schema from PyTorch's native_functions.yaml")
            return False
        if aten[overload] != str(schema):
            self.bad("func", f"the schema differs from aten's: {aten[overload]}", "copy aten's schema exactly")
            return False
        return True

    def _exec(self) -> tuple[str, list[str]]:
        text = self.entry["exec"]
        if not isinstance(text, str):
            self.bad("exec", f"expected 'KERNEL, arg, ..., out' as text, got {printable_label(text)}",
                     "write 'exec: KERNEL, arg, ..., out'")
            return "", []
        parts = [p.strip() for p in text.split(",")]
        kernel, exec_args = parts[0], parts[1:]
        if not re.fullmatch(r"[A-Za-z_]\w{0,63}", kernel):
            self.bad("exec", f"{printable_label(kernel)} is not a kernel name", "write 'exec: KERNEL, arg, ..., out'")
            return "", []
        if kernel not in self.kernels:
            hint = did_you_mean(kernel, self.kernels)
            self.bad("exec", f"no kernel '{kernel}' is registered under csrc/kernels (SIMHPU_KERNEL({kernel}))",
                     hint or f"add csrc/kernels/{kernel}.cpp, or run 'python -m codegen new-op'")
        ok = True
        for arg in exec_args:
            if arg not in self.arg_types and arg not in self.outs:
                hint = did_you_mean(arg, list(self.arg_types) + self.outs)
                self.bad("exec", f"{printable_label(arg)} is neither an argument nor an output of {self.label} "
                                 f"(outputs: {', '.join(self.outs)})",
                         hint or f"pass arguments of the schema: {', '.join(self.arg_types)}")
                ok = False
        for out in self.outs:
            if out not in exec_args:
                self.bad("exec", f"output '{out}' is not passed to the kernel", f"add '{out}' to the exec arguments")
                ok = False
        inputs = exec_args[:len(exec_args) - len(self.outs)]
        if ok and (exec_args[len(exec_args) - len(self.outs):] != self.outs or any(a in self.outs for a in inputs)):
            self.bad("exec", f"the outputs ({', '.join(self.outs)}) must come last, in order, and only once",
                     f"write 'exec: {kernel}, {', '.join(a for a in exec_args if a not in self.outs)}, "
                     f"{', '.join(self.outs)}'")
            ok = False
        if ok and kernel in self.kernels:
            for message in kernel_signatures.mismatches(kernel, self.kernels[kernel], exec_args, self.arg_types,
                                                          tuple(self.outs)):
                self.bad("exec", message, "pass the kernel's parameters in its order, or change the kernel")
            if not kernel_signatures.includes_signature_header(kernel, self.kernels[kernel]):
                header = kernel_signatures.signature_header(kernel)
                self.bad("exec", f"{os.path.relpath(self.kernels[kernel], self.root)} registers kernel '{kernel}' "
                                 f"without including {header}, so the compiler cannot check the kernel against "
                                 f"this entry", f'add #include "{header}" to that file')
        return kernel, exec_args

    def _elementwise(self) -> ElementwiseKernel | None:
        if len(self.outs) != 1:
            self.bad("elementwise", "an elementwise op has exactly one output", "return a single Tensor")
            return None
        try:
            return translate(self.entry["elementwise"], self.arg_types)
        except ExpressionError as e:
            self.bad("elementwise", str(e), "write a Python-syntax expression over the arguments, e.g. "
                     "self * sigmoid(beta * self)")
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
        example = "out: {size: x, dtype: x}"
        if not isinstance(rules, dict):
            self.bad("out", "expected {size: RULE, dtype: RULE}, or one such mapping per output", f"e.g. {example}")
            return []
        outputs = []
        for out in self.outs:
            if out not in rules:
                self.bad("out", f"no rule for output '{out}'", f"add '{out}: {{size: ..., dtype: ...}}'")
        for out, rule in rules.items():
            if out not in self.outs:
                self.bad("out", f"{printable_label(out)} is not an output of {self.label} "
                         f"(outputs: {', '.join(self.outs)})", did_you_mean(out, self.outs) or "name an output")
                continue
            if not isinstance(rule, dict) or set(rule) != {"size", "dtype"}:
                self.bad("out", f"output '{out}' needs exactly 'size' and 'dtype'",
                         f"write '{out}: {{size: RULE, dtype: RULE}}'")
                continue
            try:
                outputs.append(Output(out, parse_rule(rule["size"], "size", self.arg_types),
                                      parse_rule(rule["dtype"], "dtype", self.arg_types),
                                      f"size {rule['size']}, dtype {rule['dtype']}"))
            except RuleError as e:
                self.bad("out", f"output '{out}': {e}", "see the rule list at the top of the file")
        return outputs

    def _dtypes(self) -> list[str]:
        dtypes = self.entry.get("dtypes") or []
        if not isinstance(dtypes, list):
            self.bad("dtypes", "expected a list of dtype names", "e.g. dtypes: [float32, float16]")
            return []
        result = []
        for d in dtypes:
            if not isinstance(d, str) or d not in DTYPES:
                self.bad("dtypes", f"unknown dtype {printable_label(d)}",
                         did_you_mean(str(d), DTYPES) or f"use {', '.join(DTYPES)}")
            elif d in result:
                self.bad("dtypes", f"dtype '{d}' is listed twice", "list each dtype once")
            else:
                result.append(d)
        return result

    def _checks(self) -> list[Rule]:
        texts = self.entry.get("checks") or []
        if not isinstance(texts, list):
            self.bad("checks", f"expected a list of checks, got {printable_label(texts)}",
                     f"write 'checks: [{texts}]'" if isinstance(texts, str) else "e.g. checks: [\"same_shape(x, y)\"]")
            return []
        checks = []
        for text in texts:
            try:
                checks.append(parse_rule(text, "check", self.arg_types))
            except RuleError as e:
                self.bad("checks", str(e), "see the rule list at the top of the file")
        return checks

    def _cost(self, implementation: str) -> Cost | None:
        """`cost: {flops: EXPR, bytes: EXPR, work: vector|matrix}`, each expression over sizes."""
        cost = self.entry.get("cost")
        if cost is None:
            return None
        example = 'e.g. cost: {flops: "2 * x.size(0) * x.size(1) * w.size(1)", work: matrix}'
        if implementation not in ("exec", "elementwise"):
            self.bad("cost", f"prices a device kernel, and this entry's implementation is {implementation}",
                     "remove 'cost:' (composite ops are priced by what they call; an adapter's launches "
                     "by their operands)")
            return None
        if not isinstance(cost, dict) or not cost or set(cost) - {"flops", "bytes", "work"}:
            self.bad("cost", f"expected a mapping of flops, bytes and work, got {printable_label(cost)}", example)
            return None
        work = cost.get("work", "vector")
        if work not in COST_WORK:
            self.bad("cost", f"work: expected one of {', '.join(COST_WORK)}, got {printable_label(work)}",
                     "matrix for work on matrix units (GEMM-like), vector otherwise")
            return None
        names = [n for n, t in self.arg_types.items() if t == "Tensor" or t in ("int", "SymInt", "float", "bool")]
        scope = Scope(values=frozenset(names + self.outs), npu_ops=frozenset(), helpers=frozenset(),
                      members=COST_MEMBERS, calls=False)
        rendered = {}
        for key in ("flops", "bytes"):
            if key not in cost:
                rendered[key] = None
                continue
            try:
                rendered[key] = parse(cost[key], scope).cpp
            except CppExpressionError as e:
                self.bad("cost", f"{key}: {e}", example)
                return None
        if work == "matrix" and rendered["flops"] is None:
            self.bad("cost", "work: matrix needs flops (matrix units are priced by their FLOPs)", example)
            return None
        return Cost(work, rendered["flops"], rendered["bytes"])

    def _reference(self) -> tuple[str | None, tuple]:
        """`reference:` and `samples:`, checked (they become generated Python)."""
        reference, samples = self.entry.get("reference"), self.entry.get("samples")
        if reference is not None:
            if self.kind != "custom":
                self.bad("reference", "only custom ops have generated tests", "remove 'reference:'")
                return None, ()
            problem = check_reference(reference, list(self.arg_types))
            if problem:
                self.bad("reference", *problem)
                reference = None
        if samples is not None:
            if reference is None:
                self.bad("samples", "samples are inputs for the tests a reference generates", "add 'reference:'")
                return None, ()
            problem = check_samples(samples, self.arg_types)
            if problem:
                self.bad("samples", *problem)
                return None, ()
        clean = tuple({k: (list(v) if isinstance(v, list) else v) for k, v in s.items()} for s in samples or [])
        # Written into generated Python as the parser read it (no comment or line break of the text's own).
        return (ast.unparse(ast.parse(reference.strip(), mode="eval")) if isinstance(reference, str) else None), clean

    def _dimensions_fit_samples(self, outputs: list[Output], checks: list, samples: tuple) -> None:
        """A rule's dimensions out of range for a sample (whose shapes tell the
        ranks) are an error now, not only at the call."""
        rules = [("out", f"output '{o.name}'", o.size) for o in outputs]
        rules += [("checks", "check", c) for c in checks]
        for field, what, rule in rules:
            for number, sample in enumerate(samples, 1):
                problem = dimension_out_of_range(rule, sample)
                if problem:
                    self.bad(field, f"{what}: {rule.fn}(...): {problem} in sample {number}",
                             "give dimensions the sample's tensors have, or a sample of the rank the rule expects")
                    return

    def _variant_names(self) -> list[str]:
        variants = self.entry.get("variants") or []
        if not isinstance(variants, list):
            self.bad("variants", "expected a list", "e.g. variants: [out, inplace]")
            return []
        names = []
        for v in variants:
            if v not in VARIANTS:
                self.bad("variants", f"unknown variant {printable_label(v)}",
                         did_you_mean(str(v), VARIANTS) or "use out or inplace")
            elif v in names:
                self.bad("variants", f"variant '{v}' is listed twice", "list each variant once")
            else:
                names.append(v)
        return names

    def _variants(self, schema: FunctionSchema, outputs: list[Output], variants: list[str]) -> tuple:
        if "composite" in self.entry and variants:
            self.bad("variants", "composite ops have no out= or in-place variants", "remove 'variants:'")
        if "composite" in self.entry and "checks" in self.entry:
            self.bad("checks", "a composite op checks nothing itself: the ops its expression calls check their "
                               "arguments", "remove 'checks:', or give the op a kernel (exec:) that needs them")
        if "inplace" in variants:
            first = schema.arguments.flat_positional[0] if schema.arguments.flat_positional else None
            if first is None or first.name != "self" or str(first.type) != "Tensor" or len(outputs) != 1:
                self.bad("variants", "an in-place variant writes its single output into a first argument "
                                     "'Tensor self'", "name the first argument self, or drop 'inplace'")
        if self.kind == "official" and variants:
            self.bad("variants", "official ops get their variants from PyTorch", "remove 'variants:'")
        return tuple(v for v in VARIANTS if v in variants)


def _aten_schemas(name: str) -> list:
    import torch  # torch's own operator registry: the truth about aten schemas
    return torch._C._jit_get_schemas_for_operator(f"aten::{name}")
