"""derivatives.yaml, read by torchgen's own derivative loader.

Entries are checked against the declared operators first, so mistakes come back
with file:line; torchgen then parses each formula exactly as PyTorch does for
its own derivatives.yaml (saved inputs and outputs, grads[i], result, ...).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

import torchgen
from torchgen.gen import parse_native_yaml
from torchgen.model import FunctionSchema
from torchgen.packaged.autograd.load_derivatives import create_differentiability_info

from ..model.cpp_expr import ExpressionError, Scope, formula_helpers, parse, symint_arguments
from ..errors import Problems, did_you_mean
from ..model.operators import Project, output_names
from ..names import printable_label
from ..yaml_loader import LineDict, LineList, load_yaml_file

TAGS_YAML = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "tags.yaml")
SPECIAL_KEYS = {"name", "output_differentiability", "result"}
# Whole formulas that are torchgen keywords rather than expressions: for an
# argument, and for `result` (the forward-mode derivative).
KEYWORD_FORMULAS = {None: ("non_differentiable",), "result": ("auto_element_wise", "auto_linear")}


_UNTAGGED = re.compile(r"nondeterministic_seeded tag missing for (\S+)")


def _native_functions(project: Project, problems: Problems):
    """torchgen NativeFunctions for the custom ops, as if from native_functions.yaml. torchgen takes
    an operator named like a random one (rand, dropout, a Generator argument) to draw random numbers,
    and refuses it without the nondeterministic_seeded tag: that is a problem at the entry's line."""
    ops = list(project.custom_ops)
    while True:
        entries = [{"func": str(op.schema), "__line__": op.line, **({"tags": list(op.tags)} if op.tags else {})}
                   for op in ops]
        # The path is only torchgen's cache key; make it unique to this op set.
        key = "simhpu-ops-" + hashlib.sha1(repr(entries).encode()).hexdigest()
        try:
            return parse_native_yaml(key, TAGS_YAML, loaded_yaml=entries, skip_native_fns_gen=True).native_functions
        except AssertionError as e:
            untagged = _UNTAGGED.search(str(e))
            op = next((o for o in ops if untagged and o.name == untagged.group(1)), None)
            if op is None:
                raise
            problems.add(op.file, op.line, op.name, "tags",
                         "its name or arguments say it draws random numbers (rand, dropout or a Generator), and "
                         "PyTorch's autograd code generator requires such an operator to be tagged",
                         "add 'tags: [nondeterministic_seeded]' to the entry, or rename what says so if it is "
                         "not random")
            ops.remove(op)


def formula_values(op) -> set[str]:
    """The names a formula of `op` may use."""
    values = {a.name for a in op.schema.arguments.flat_all}
    values |= {"grad", "grads", "grad_input_mask", "result"} | set(output_names(op.schema))
    values |= {f"result{i}" for i in range(len(op.schema.returns))}
    return values


def _output_differentiability(entry, op, bad):
    """The entry's output_differentiability, checked: one bool per output."""
    if "output_differentiability" not in entry:
        return None
    value = entry["output_differentiability"]
    count = len(op.schema.returns)
    if not isinstance(value, list) or len(value) != count or not all(isinstance(v, bool) for v in value):
        bad("output_differentiability", f"expected a list of {count} true/false value(s), one per output of "
            f"{op.name}, got {value!r}", f"e.g. output_differentiability: [{', '.join(['true'] * count)}]")
        return None
    if not any(value):
        bad("output_differentiability", "no output is differentiable, so the entry has nothing to do",
            "remove the entry, or mark an output true")
        return None
    return value


@dataclass(frozen=True)
class Derivative:
    info: object  # torchgen's DifferentiabilityInfo
    aten_calls: frozenset[str]  # aten ops the formulas call
    npu_calls: frozenset[str] = frozenset()  # and the project's own operators (their C++ API)


def load_derivatives(path: str, project: Project, problems: Problems, root: str,
                     helpers_header: str) -> dict[str, Derivative]:
    """Operator name -> its derivative, for every valid entry of derivatives.yaml;
    formulas may call the helpers declared in `helpers_header`."""
    file = os.path.relpath(path, root)
    entries = load_yaml_file(path, file, problems, empty=LineList())
    if entries is None:
        return {}
    if not isinstance(entries, LineList):
        problems.add(file, getattr(entries, "line", 1), "(file)", "",
                     "expected a list of entries, each with 'name:' and formulas",
                     "write each entry as '- name: SCHEMA' followed by 'argument: formula' lines")
        return {}
    return derivatives_of(entries, file, project, problems, helpers_header)


def derivatives_of(entries: LineList, file: str, project: Project, problems: Problems,
                   helpers_header: str) -> dict[str, Derivative]:
    """Operator name -> its derivative, for every valid entry of `entries` (read from `file`)."""
    found: dict[str, Derivative] = {}
    ops = {op.name: op for op in project.ops}
    functions = _native_functions(project, problems)
    by_signature = defaultdict(list)
    by_schema = {}
    for fn in functions:
        by_signature[fn.func.signature()].append(fn)
        by_schema[str(fn.func)] = fn
    op_counter: Counter[str] = Counter()
    attached: set[str] = set()
    npu_ops = frozenset(op.cpp_name for op in project.custom_ops) | project.rejected
    helpers = frozenset(formula_helpers(helpers_header))

    for index, entry in enumerate(entries):
        if not isinstance(entry, LineDict) or not isinstance(entry.get("name"), str):
            problems.add(file, entries.line_at(index), "(entry)", "name", "each entry needs 'name: <schema>'",
                         "begin the entry with '- name:' and the operator's schema, as in op_plugin_functions.yaml")
            continue
        label = printable_label(entry["name"].split("(")[0].strip(), quote=False)

        def bad(key: str, message: str, fix: str) -> None:
            problems.add(file, entry.line_of(key), label, key, message, fix)

        try:
            if not entry["name"].isascii() or not entry["name"].isprintable():
                raise ValueError("the schema holds characters other than printable ASCII")
            schema = FunctionSchema.parse(entry["name"])
        except Exception as e:
            bad("name", f"schema does not parse: {printable_label(str(e).splitlines()[0] if str(e) else e, 200, False)}",
                "copy the func: line of the operator")
            continue
        op = ops.get(str(schema.name))
        if op is None and (str(schema.name) in project.rejected or not project.readable):
            continue  # its declaration has problems of its own, reported there
        if op is None:
            bad("name", f"no operator '{schema.name}' is declared in op_plugin_functions.yaml",
                did_you_mean(str(schema.name), ops) or "declare the operator first")
            continue
        if op.kind != "custom":
            bad("name", f"'{op.name}' is an official aten op; it keeps PyTorch's own derivative",
                "remove this entry")
            continue
        if schema.signature() != op.schema.signature():
            bad("name", f"schema differs from the declaration at {op.file}:{op.line}: {op.schema}",
                "copy the func: line of the operator")
            continue
        if op.name in attached:
            bad("name", f"a second derivative entry for '{op.name}'", "merge the two entries")
            continue
        arg_types = {a.name: str(a.type) for a in op.schema.arguments.flat_all}
        errors_before = len(problems.items)
        formulas = {}
        calls: set[str] = set()
        npu_calls: set[str] = set()
        scope = Scope(frozenset(formula_values(op)), npu_ops, helpers, symint_values=symint_arguments(op.schema))
        for key in entry:
            if key in SPECIAL_KEYS - {"result"}:
                continue
            if key != "result":
                for var in (v.strip() for v in str(key).split(",")):
                    if var not in arg_types:
                        bad(key, f"'{var}' is not an argument of {op.name}",
                            did_you_mean(var, arg_types) or f"arguments: {', '.join(arg_types)}")
                    elif not arg_types[var].startswith("Tensor"):
                        bad(key, f"'{var}' is {arg_types[var]}, not a Tensor: only Tensor arguments have gradients",
                            f"remove '{var}' from this entry")
            if isinstance(entry[key], str) and entry[key].strip() in KEYWORD_FORMULAS.get(key, KEYWORD_FORMULAS[None]):
                formulas[key] = entry[key].strip()  # one of torchgen's own words, not C++
                continue
            try:
                inputs = len(str(key).split(",")) if key != "result" else 0
                lengths = (("grad_input_mask", inputs), ("grads", len(op.schema.returns)))
                parsed = parse(entry[key], dataclasses.replace(scope, lengths=lengths))
            except ExpressionError as e:
                bad(key, f"the formula {e}", "write one C++ expression over grad, the inputs and the outputs, "
                    "calling npu_* operators, aten operators or helpers from csrc/autograd/formulas.h")
                continue
            calls |= parsed.aten_calls
            npu_calls |= parsed.npu_calls
            formulas[key] = parsed.cpp
        differentiability = _output_differentiability(entry, op, bad)
        attached.add(op.name)
        if len(problems.items) != errors_before:
            continue
        try:
            defn = {"name": str(entry["name"]), "dispatch": {"Default": formulas}}
            if differentiability is not None:
                defn["output_differentiability"] = differentiability
            _, per_key = create_differentiability_info(defn, by_signature, by_schema, op_counter, set())
            found[op.name] = Derivative(per_key["Default"], frozenset(calls), frozenset(npu_calls))
        except Exception as e:  # torchgen reports formula problems as exceptions
            # torchgen appends where it read the function; that is our own temporary list.
            reason = str(e).split("\n  in native_functions.yaml")[0]
            bad("name", f"torchgen rejected the entry: {printable_label(reason, 300, quote=False)}",
                "see PyTorch's tools/autograd/derivatives.yaml for how formulas are written")
    return found
