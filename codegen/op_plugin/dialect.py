"""op-plugin's own YAML dialect: Ascend's op_plugin_functions.yaml and derivatives.yaml, as written
for torch_npu, read into what simhpu does with each entry.

A file in the dialect is known by its `all_version:` list. Its sections are `official` (aten
operators), `custom` (new operators), `autograd`, `symint` and `quant`; an entry is a `func:` schema
and the torch versions each of its implementations serves:

    all_version: [v2.1, v2.2, ..., v2.15]
    official:
      - func: abs.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)
        acl_op: all_version                 # every listed version
        op_api: [v2.1, newest]              # a closed range; newest: the last of all_version
        gen_opapi:                          # generated ACLNN adapter
          out: {size: self, dtype: self, name: self}
          exec: aclnnAbs, self, out

A `symint:` entry for an operator declared in another section marks its C++ adapter as taking
SymInt sizes (simhpu's registrations take the schema's types as they are), an `autograd:` one as
having autograd of its own; one for an operator declared nowhere else declares it. The installed torch selects the entries: those whose `acl_op`, `op_api`, `internal_format_opapi`
or `dvm` names its version (an entry naming none is a schema for every version). Two entries of one
name may share no version. Every field is checked, and each problem is reported at its file:line
with a fix; what simhpu cannot serve is a note, never a problem (see FIELDS for what each field
means here).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from torchgen.model import FunctionSchema

from ..errors import Problems, did_you_mean
from ..names import printable_label
from ..yaml_loader import LineDict, LineList, entry_list, load_yaml_file

SECTIONS = ("official", "custom", "autograd", "symint", "quant")
# Fields naming the torch versions an implementation serves: an entry is selected when one names the
# installed torch's.
IMPLEMENTATION_VERSIONS = ("acl_op", "op_api", "internal_format_opapi", "dvm")
# What each field of an entry means on simhpu.
FIELDS = {
    "func": "the operator's schema (PyTorch's schema language)",
    "acl_op": "versions an ACLOP (CANN graph operator) adapter serves; on simhpu, the entry is served there too",
    "op_api": "versions an ACLNN adapter serves; on simhpu, the entry is served there too",
    "internal_format_opapi": "versions whose ACLNN adapter takes NPU-internal formats; simhpu has one "
                             "format, so the same as op_api",
    "dvm": "versions a DVM (graph-fused) kernel serves; on simhpu, the same as op_api",
    "exposed": "versions torch_npu exposes the custom operator as torch_npu.NAME; simhpu always binds it",
    "sparse": "versions it also serves sparse tensors; simhpu serves dense tensors only (noted)",
    "gen_opapi": "a generated ACLNN adapter: its outputs' size and dtype rules and the kernel it launches",
    "device_check": "'NoCheck': torch_npu skips its same-device check; simhpu checks devices anyway",
    "tags": "schema tags (nondeterministic_seeded, ...), as native_functions.yaml's",
    "dispatch": "a dispatch key -> kernel table, as native_functions.yaml's",
    "structured": "native_functions.yaml's structured kernel flag",
    "structured_delegate": "native_functions.yaml's: the out= operator this one is structured on",
    "use_const_ref_for_mutable_tensors": "native_functions.yaml's flag for the C++ signature",
}
GEN_OPAPI_FIELDS = {"exec", "structured_inherit", "new_params", "cpu_scalar_h2d", "cpu_scalar_op",
                    "integral_identity_tensor"}
OUTPUT_RULE_FIELDS = {"size", "dtype", "name"}
VERSION = re.compile(r"v(\d+)\.(\d+)")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
FIX_VERSIONS = ("name versions of all_version: 'all_version', '[v2.1, newest]' (a closed range), "
                "'v2.1, v2.2' or 'v2.1'")


def is_dialect(doc) -> bool:
    """An op-plugin file: its `all_version:` list is what sets it apart from simhpu's own."""
    return isinstance(doc, dict) and "all_version" in doc


def torch_version_tag(version: str | None = None) -> str:
    """'v2.13' for torch 2.13.x: how op-plugin's files name a torch version."""
    if version is None:
        import torch
        version = torch.__version__
    major, minor = version.split("+")[0].split(".")[:2]
    return f"v{int(major)}.{int(minor)}"


@dataclass(frozen=True)
class OutputRule:
    name: str
    size: str | None
    dtype: str | None
    named_like: str | None  # the input whose names the output takes (named tensors)


@dataclass(frozen=True)
class GenOpApi:
    """A gen_opapi block: the ACLNN kernel and its arguments, and the outputs' rules."""
    kernel: str  # aclnnXxx
    args: tuple[str, ...]  # as written; () when the exec gives only the kernel (the schema's order)
    outputs: tuple[OutputRule, ...]
    new_params: tuple[tuple[str, str], ...]
    inherits: str | None  # structured_inherit: the out= entry whose block this one takes


@dataclass(frozen=True)
class DialectEntry:
    section: str
    schema: FunctionSchema
    line: int
    implementations: tuple[str, ...]  # of IMPLEMENTATION_VERSIONS, those serving the installed torch
    gen_opapi: GenOpApi | None
    notes: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()  # schema tags (nondeterministic_seeded, ...)

    @property
    def name(self) -> str:
        return str(self.schema.name)


@dataclass
class DialectReport:
    """What a dialect file holds for one torch version."""
    file: str
    version: str
    all_versions: tuple[str, ...]
    entries: list[DialectEntry] = field(default_factory=list)
    skipped: int = 0  # entries for other torch versions only
    marks: int = 0  # symint and autograd entries marking an operator declared in another section
    gone: dict = field(default_factory=dict)  # type name -> entries whose schema uses a type this torch lacks
    derivatives: int = 0  # derivatives.yaml entries for this version
    derivative_entries: object = None  # those entries (a LineList), as simhpu's own derivatives.yaml holds them
    derivatives_skipped: int = 0

    def summary(self) -> str:
        by_section = {s: [e for e in self.entries if e.section == s] for s in SECTIONS}
        generated = sum(1 for e in self.entries if e.gen_opapi is not None)
        kernels = {e.gen_opapi.kernel for e in self.entries if e.gen_opapi is not None and e.gen_opapi.kernel}
        lines = [f"ok: op-plugin dialect, torch {self.version}: {len(self.entries)} entries for it "
                 f"({self.skipped} for other versions only), {self.derivatives} derivatives "
                 f"({self.derivatives_skipped} for other versions only)",
                 "  " + ", ".join(f"{s} {len(by_section[s])}" for s in SECTIONS)
                 + f" (and {self.marks} symint/autograd entries marking operators declared above)",
                 f"  gen_opapi: {generated} entries, {len(kernels)} distinct ACLNN kernels"]
        notes: dict[str, int] = {f"the schema uses {t}, which torch {self.version} does not have: not served": n
                                 for t, n in self.gone.items()}
        for e in self.entries:
            for note in e.notes:
                notes[note] = notes.get(note, 0) + 1
        if notes:
            lines.append("notes (what simhpu does not serve as torch_npu does; not problems):")
            lines += [f"  {count:5} x {note}" for note, count in sorted(notes.items(), key=lambda x: -x[1])]
        return "\n".join(lines)


class _VersionSpec:
    """Reads a version field against all_version."""

    def __init__(self, versions: tuple[str, ...]):
        self.versions = versions

    def read(self, value) -> tuple[frozenset[str] | None, str]:
        """(the versions named, '') or (None, what is wrong)."""
        if value == "all_version":
            return frozenset(self.versions), ""
        if isinstance(value, LineList) or isinstance(value, list):
            if len(value) != 2 or not all(isinstance(v, str) for v in value):
                return None, f"a range is two versions [first, last], got {printable_label(value)}"
            first, last = value
            last = self.versions[-1] if last == "newest" else last
            for v in (first, last):
                if v not in self.versions:
                    return None, f"'{v}' is not in all_version"
            i, j = self.versions.index(first), self.versions.index(last)
            if i > j:
                return None, f"the range [{first}, {value[1]}] runs backwards"
            return frozenset(self.versions[i:j + 1]), ""
        if isinstance(value, str):
            named = [v.strip() for v in value.split(",")]
            unknown = [v for v in named if v not in self.versions]
            if unknown:
                return None, f"'{unknown[0]}' is not in all_version"
            return frozenset(named), ""
        return None, f"expected versions, got {printable_label(value)}"


def load_dialect(doc: LineDict, file: str, problems: Problems, version: str | None = None) -> DialectReport:
    """The entries of an op-plugin file for the installed torch (or `version`), checked."""
    version = version or torch_version_tag()
    all_versions = doc.get("all_version")
    if (not isinstance(all_versions, list) or not all_versions
            or not all(isinstance(v, str) and VERSION.fullmatch(v) for v in all_versions)):
        problems.add(file, doc.line_of("all_version"), "(file)", "all_version",
                     f"expected a list of torch versions like [v2.1, v2.2], got {printable_label(all_versions)}",
                     "list the torch versions the file serves, oldest first")
        return DialectReport(file, version, ())
    report = DialectReport(file, version, tuple(all_versions))
    if version not in all_versions:
        problems.add(file, doc.line_of("all_version"), "(file)", "all_version",
                     f"the installed torch is {version}, which all_version does not list",
                     f"add {version} to all_version and to the entries that serve it, or use a torch it lists")
        return report
    for key in doc:
        if key != "all_version" and key not in SECTIONS:
            problems.add(file, doc.line_of(key), "(file)", key, "unknown top-level key",
                         did_you_mean(key, SECTIONS) or f"use all_version and the sections {', '.join(SECTIONS)}")
    spec = _VersionSpec(tuple(all_versions))
    served: dict[str, list[tuple[frozenset, int]]] = {}
    rejected: set[str] = set()  # names of entries with problems: what refers to them is not reported too
    for section in SECTIONS:
        entries = entry_list(doc, section, file, problems)
        if entries is None:
            continue
        for index, entry in enumerate(entries):
            loaded = _load_entry(entry, entries.line_at(index), section, file, spec, version, problems, served)
            if loaded is None:
                if isinstance(entry, LineDict) and isinstance(entry.get("func"), str):
                    rejected.add(entry["func"].split("(")[0].strip())
                continue
            if loaded == "skipped":
                report.skipped += 1
                continue
            if loaded == "mark":
                report.marks += 1
                continue
            if isinstance(loaded, tuple) and loaded[0] == "gone":
                report.gone[loaded[1]] = report.gone.get(loaded[1], 0) + 1
                continue
            report.entries.append(loaded)
    _resolve_inheritance(report, rejected, file, problems)
    return report


def _load_entry(entry, line: int, section: str, file: str, spec: _VersionSpec, version: str,
                problems: Problems, served: dict):
    if not isinstance(entry, LineDict) or not isinstance(entry.get("func"), str):
        problems.add(file, getattr(entry, "line", line), f"({section} entry)", "func",
                     "expected a mapping with a 'func:' schema", "write the entry as '- func: SCHEMA' and its fields")
        return None
    label = printable_label(entry["func"].split("(")[0].strip(), quote=False)

    def bad(key: str, message: str, fix: str) -> None:
        problems.add(file, entry.line_of(key) if key in entry else entry.line, label, key, message, fix)

    before = len(problems.items)
    for key in entry:
        if key not in FIELDS:
            bad(key, "unknown field", did_you_mean(key, FIELDS) or f"allowed fields: {', '.join(sorted(FIELDS))}")
    versions: dict[str, frozenset] = {}
    for key in (*IMPLEMENTATION_VERSIONS, "exposed", "sparse"):
        if key in entry:
            named, wrong = spec.read(entry[key])
            if named is None:
                bad(key, wrong, FIX_VERSIONS)
            else:
                versions[key] = named
    _check_flags(entry, bad)
    if len(problems.items) != before:
        return None
    declared = [k for k in IMPLEMENTATION_VERSIONS if k in versions]
    implementations = tuple(k for k in declared if version in versions[k])
    if declared and not implementations:
        return "skipped"
    try:
        schema = FunctionSchema.parse(entry["func"])
    except Exception as e:  # torchgen reports a bad schema with AssertionError, RuntimeError, ...
        message = str(e).splitlines()[0][:200]
        gone = re.fullmatch(r"unrecognized type (\w+)", message)
        if gone:  # a type this torch no longer has (Dimname, after named tensors): the operator is gone too
            return ("gone", gone.group(1))
        bad("func", f"not a valid schema: {message}",
            "write the schema as native_functions.yaml does, e.g. 'name.overload(Tensor self) -> Tensor'")
        return None
    for_version = frozenset().union(*(versions[k] for k in declared)) if declared else frozenset(spec.versions)
    name = str(schema.name)
    if section in ("symint", "autograd") and name in served:
        # marks an operator declared above: its C++ adapter takes SymInt sizes, or it has autograd of its own
        return "mark"
    for other, other_line in served.get(name, []):
        if other & for_version:
            bad("func", f"'{name}' is declared again for {', '.join(sorted(other & for_version))} "
                        f"(first at line {other_line})",
                "give the two entries disjoint versions, or remove one")
            return None
    served.setdefault(name, []).append((for_version, entry.line))
    notes = []
    if "sparse" in versions and version in versions["sparse"]:
        notes.append("sparse: simhpu serves this operator for dense tensors only")
    gen = None
    if "gen_opapi" in entry:
        gen = _gen_opapi(entry, schema, bad)
        if gen is None and len(problems.items) != before:
            return None
    if section == "official":
        notes.append("official operator: runs on the reference path (ATen's CPU kernel as a device kernel)"
                     + ("; a build runs it as a simulated ACLNN kernel where its gen_opapi rules can be read" if gen else ""))
    else:
        kernel = "its ACLNN kernel" if gen is not None else "its hand-written adapter"
        notes.append(f"{section} operator: its schema is declared; {kernel} is torch_npu's, not provided here")
    tags = entry.get("tags", ())
    return DialectEntry(section, schema, entry.line, implementations, gen, tuple(notes),
                        (tags,) if isinstance(tags, str) else tuple(tags))


def _check_flags(entry: LineDict, bad) -> None:
    if "device_check" in entry and entry["device_check"] != "NoCheck":
        bad("device_check", f"expected 'NoCheck', got {printable_label(entry['device_check'])}",
            "write 'device_check: NoCheck' or leave the field out")
    for key in ("structured", "use_const_ref_for_mutable_tensors"):
        if key in entry and not isinstance(entry[key], bool):
            bad(key, f"expected true or false, got {printable_label(entry[key])}", f"write '{key}: True'")
    if "structured_delegate" in entry and not isinstance(entry["structured_delegate"], str):
        bad("structured_delegate", "expected an operator name", "write 'structured_delegate: name.out'")
    if "tags" in entry:
        tags = entry["tags"]
        tags = [tags] if isinstance(tags, str) else tags
        if not isinstance(tags, list) or not all(isinstance(t, str) and IDENTIFIER.fullmatch(t) for t in tags):
            bad("tags", f"expected tag names, got {printable_label(entry['tags'])}",
                "write 'tags: nondeterministic_seeded' or a list of tags")
    if "dispatch" in entry:
        table = entry["dispatch"]
        if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str) and IDENTIFIER.fullmatch(v)
                                                  for k, v in table.items()):
            bad("dispatch", f"expected a mapping of dispatch keys to kernel names, got {printable_label(table)}",
                "write 'dispatch: {CompositeExplicitAutograd: kernel_name}'")


def _outputs_of(schema: FunctionSchema) -> list[str] | None:
    """The names a gen_opapi block must give its outputs' rules: an out= operator's out arguments;
    None for a functional one, whose rules name its returns freely, in order."""
    return [a.name for a in schema.arguments.out] or None


def _gen_opapi(entry: LineDict, schema: FunctionSchema, bad) -> GenOpApi | None:
    block = entry["gen_opapi"]
    if not isinstance(block, LineDict):
        bad("gen_opapi", f"expected a mapping (exec:, out:, ...), got {printable_label(block)}",
            "write 'gen_opapi:' with 'exec: aclnnName' and the outputs' rules under it")
        return None
    arguments = [a.name for a in schema.arguments.flat_all]
    required_outputs = _outputs_of(schema)
    if "structured_inherit" in block:
        inherits = block["structured_inherit"]
        if not isinstance(inherits, str):
            bad("gen_opapi", "structured_inherit: expected the name of an out= entry", "write 'structured_inherit: name.out'")
            return None
        extra = set(block) - {"structured_inherit", "new_params"}
        if extra:
            bad("gen_opapi", f"structured_inherit takes its fields from '{inherits}'; {sorted(extra)} would be ignored",
                "remove them, or drop structured_inherit")
            return None
        return GenOpApi("", (), (), (), inherits)
    rules, new_params = [], []
    for key, value in block.items():
        if key == "exec":
            continue
        if key == "new_params":
            if not isinstance(value, dict) or not all(isinstance(k, str) and IDENTIFIER.fullmatch(k) and
                                                      isinstance(v, (str, int, float, bool)) for k, v in value.items()):
                bad("gen_opapi", "new_params: expected a mapping of new names to C++ expressions",
                    "write 'new_params: {name: expression}'")
                return None
            new_params = [(k, str(v)) for k, v in value.items()]
            continue
        if key in ("cpu_scalar_h2d", "cpu_scalar_op"):
            # the arguments a CPU scalar tensor may be passed for: names, or {param: NAME, exec: aclnnKernel}
            # (the kernel the scalar form launches)
            listed = value if isinstance(value, list) else [value]
            listed = [v.get("param") if isinstance(v, dict) else v for v in listed]
            unknown = [v for v in listed if v not in arguments]
            if unknown:
                bad("gen_opapi", f"{key}: '{unknown[0]}' is not an argument of the schema",
                    did_you_mean(unknown[0], arguments) or f"name arguments of {schema.name}")
                return None
            continue
        if key == "integral_identity_tensor":
            continue
        if isinstance(value, dict):
            if required_outputs is not None and key not in required_outputs:
                bad("gen_opapi", f"'{key}' is not an out argument of {schema.name} "
                                 f"(its out arguments: {', '.join(required_outputs)})",
                    did_you_mean(key, required_outputs) or "an out= operator's rules name its out arguments")
                return None
            unknown = set(value) - OUTPUT_RULE_FIELDS
            if unknown:
                bad("gen_opapi", f"{key}: unknown rule field '{sorted(unknown)[0]}'",
                    "an output's rule has size, dtype and name")
                return None
            rules.append(OutputRule(key, _text(value.get("size")), _text(value.get("dtype")), _text(value.get("name"))))
            continue
        bad("gen_opapi", f"'{key}' is neither a field nor an output's rule (a mapping of size, dtype, name)",
            did_you_mean(key, GEN_OPAPI_FIELDS) or
            f"fields: {', '.join(sorted(GEN_OPAPI_FIELDS))}; an output's rule: '{key}: {{size: ..., dtype: ...}}'")
        return None
    returns = len(schema.returns)
    if required_outputs is None and rules and len(rules) != returns:
        bad("gen_opapi", f"rules for {len(rules)} output(s), where {schema.name} returns {returns}",
            "give one rule (size, dtype) for each return, in order")
        return None
    if "exec" not in block:
        bad("gen_opapi", "no 'exec:' names the ACLNN kernel", "add 'exec: aclnnName[, arguments...]'")
        return None
    exec_line = block["exec"]
    if not isinstance(exec_line, str):
        bad("gen_opapi", f"exec: expected 'aclnnName, arguments...', got {printable_label(exec_line)}",
            "write 'exec: aclnnName, self, out'")
        return None
    parts = [p.strip() for p in exec_line.split(",")]
    kernel, args = parts[0], tuple(parts[1:])
    if not IDENTIFIER.fullmatch(kernel):
        bad("gen_opapi", f"exec: the kernel {printable_label(kernel)} is not a name", "write 'exec: aclnnName, ...'")
        return None
    known = set(arguments) | {rule.name for rule in rules} | {name for name, _ in new_params} | {"out"}
    for arg in args:
        if not IDENTIFIER.fullmatch(arg) and not _is_literal(arg):
            bad("gen_opapi", f"exec: argument {printable_label(arg)} is neither a name nor a literal",
                "pass arguments, outputs and new_params by name")
            return None
        if IDENTIFIER.fullmatch(arg) and arg not in known and arg not in ("true", "false", "nullptr"):
            bad("gen_opapi", f"exec: '{arg}' is not an argument, output or new_params name of {schema.name}",
                did_you_mean(arg, known) or "add it to new_params, or pass an argument of the schema")
            return None
    return GenOpApi(kernel, args, tuple(rules), tuple(new_params), None)


def _is_literal(text: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?[fF]?|\"[^\"]*\"", text) is not None


def _text(value) -> str | None:
    return None if value is None else str(value)


def _resolve_inheritance(report: DialectReport, rejected: set, file: str, problems: Problems) -> None:
    """structured_inherit names an out= entry of the same version with a gen_opapi of its own."""
    by_name = {e.name: e for e in report.entries}
    for index, e in enumerate(report.entries):
        if e.gen_opapi is None or e.gen_opapi.inherits is None or e.gen_opapi.inherits in rejected:
            continue
        parent = by_name.get(e.gen_opapi.inherits)
        if parent is None or parent.gen_opapi is None or parent.gen_opapi.inherits is not None:
            problems.add(file, e.line, e.name, "gen_opapi",
                         f"structured_inherit names '{e.gen_opapi.inherits}', which has no gen_opapi of its own "
                         f"for {report.version}",
                         did_you_mean(e.gen_opapi.inherits, by_name) or "name the out= entry whose exec: this takes")
            continue
        inherited = GenOpApi(parent.gen_opapi.kernel, (), parent.gen_opapi.outputs, e.gen_opapi.new_params,
                             e.gen_opapi.inherits)
        report.entries[index] = dataclasses.replace(e, gen_opapi=inherited)


def load_dialect_derivatives(path: str, file: str, report: DialectReport, problems: Problems) -> LineList:
    """derivatives.yaml in the dialect: torchgen's format with a `version:` field; counts the
    entries for the installed torch, checks their versions and names, and returns those entries
    without their `version:` (as simhpu's own derivatives.yaml would hold them)."""
    selected = LineList()
    selected.line, selected.item_lines = 1, []
    loaded = load_yaml_file(path, file, problems, empty=LineDict())
    if loaded is None:
        return selected
    doc = loaded.get("backward") if isinstance(loaded, LineDict) else None
    if isinstance(loaded, LineDict):
        for key in loaded:
            if key not in ("all_version", "backward"):
                problems.add(file, loaded.line_of(key), "(file)", key, "unknown top-level key",
                             "the dialect's derivatives.yaml holds all_version and backward")
    if not isinstance(doc, LineList):
        problems.add(file, getattr(loaded, "line", 1), "(file)", "backward",
                     "expected 'backward:' with a list of entries, each with 'name:'",
                     "write 'backward:' and under it each entry as '- name: SCHEMA' with its formulas")
        return selected
    spec = _VersionSpec(report.all_versions)
    for index, entry in enumerate(doc):
        line = doc.line_at(index)
        if not isinstance(entry, LineDict) or not isinstance(entry.get("name"), str):
            problems.add(file, line, "(derivative)", "name", "expected a mapping with 'name: SCHEMA'",
                         "write the entry as '- name: SCHEMA' and its formulas")
            continue
        label = printable_label(entry["name"].split("(")[0].strip(), quote=False)
        if "version" in entry:
            named, wrong = spec.read(entry["version"])
            if named is None:
                problems.add(file, entry.line_of("version"), label, "version", wrong, FIX_VERSIONS)
                continue
            if report.version not in named:
                report.derivatives_skipped += 1
                continue
        try:
            FunctionSchema.parse(entry["name"])
        except Exception as e:
            problems.add(file, entry.line_of("name"), label, "name",
                         f"not a valid schema: {str(e).splitlines()[0][:200]}",
                         "write the schema of the operator the formulas differentiate")
            continue
        report.derivatives += 1
        formulas = LineDict((k, v) for k, v in entry.items() if k != "version")
        formulas.line, formulas.key_lines = entry.line, entry.key_lines
        selected.append(formulas)
        selected.item_lines.append(line)
    return selected
