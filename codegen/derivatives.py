"""derivatives.yaml, read by torchgen's own derivative loader.

Entries are checked against the declared operators first, so mistakes come back
with file:line; torchgen then parses each formula exactly as PyTorch does for
its own derivatives.yaml (saved inputs and outputs, grads[i], result, ...).
"""
from __future__ import annotations

import hashlib
import os
from collections import Counter, defaultdict

import torchgen
from torchgen.gen import parse_native_yaml
from torchgen.model import FunctionSchema
from torchgen.packaged.autograd.load_derivatives import create_differentiability_info

from .cpp_calls import formula_helpers, resolve
from .errors import Problems, did_you_mean
from .model import Project, output_names
from .yaml_loader import DuplicateKey, LineDict, load_yaml

TAGS_YAML = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "tags.yaml")
SPECIAL_KEYS = {"name", "output_differentiability", "result", "dispatch"}


def _native_functions(project: Project):
    """torchgen NativeFunctions for the custom ops, as if from native_functions.yaml."""
    entries = [{"func": str(op.schema), "__line__": op.line} for op in project.custom_ops]
    # The path is only torchgen's cache key; make it unique to this op set.
    key = "simhpu-ops-" + hashlib.sha1(repr(entries).encode()).hexdigest()
    return parse_native_yaml(key, TAGS_YAML, loaded_yaml=entries, skip_native_fns_gen=True).native_functions


def formula_values(op) -> set[str]:
    """The names a formula of `op` may use."""
    values = {a.name for a in op.schema.arguments.flat_all}
    values |= {"grad", "grads", "grad_input_mask", "result"} | set(output_names(op.schema))
    values |= {f"result{i}" for i in range(len(op.schema.returns))}
    return values


def attach_derivatives(path: str, project: Project, problems: Problems, root: str = ".") -> None:
    file = os.path.relpath(path, root)
    with open(path) as f:
        text = f.read()
    try:
        entries = load_yaml(text) or []
    except DuplicateKey as e:
        problems.add(file, e.line, "(file)", e.key, str(e), "remove one of the two")
        return
    except Exception as e:
        mark = getattr(e, "problem_mark", None)
        problems.add(file, mark.line + 1 if mark else 1, "(file)", "", f"not valid YAML: {getattr(e, 'problem', e)}")
        return
    if not isinstance(entries, list):
        problems.add(file, 1, "(file)", "", "expected a list of entries, each with 'name:' and formulas")
        return

    ops = {op.name: op for op in project.ops}
    functions = _native_functions(project)
    by_signature = defaultdict(list)
    by_schema = {}
    for fn in functions:
        by_signature[fn.func.signature()].append(fn)
        by_schema[str(fn.func)] = fn
    op_counter: Counter[str] = Counter()
    npu_ops = {op.cpp_name for op in project.custom_ops}
    helpers = formula_helpers(root)

    for entry in entries:
        if not isinstance(entry, LineDict) or "name" not in entry:
            line = entry.line if isinstance(entry, LineDict) else 1
            problems.add(file, line, "(entry)", "name", "each entry needs 'name: <schema>'")
            continue
        label = str(entry["name"]).split("(")[0]

        def bad(key: str, message: str, fix: str = "") -> None:
            problems.add(file, entry.line_of(key), label, key, message, fix)

        try:
            schema = FunctionSchema.parse(str(entry["name"]))
        except Exception as e:
            bad("name", f"schema does not parse: {e}", "copy the func: line of the operator")
            continue
        op = ops.get(str(schema.name))
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
        if op.derivative is not None:
            bad("name", f"a second derivative entry for '{op.name}'", "merge the two entries")
            continue
        arg_names = {a.name for a in op.schema.arguments.flat_all}
        errors_before = len(problems.items)
        for key in entry:
            if key in SPECIAL_KEYS:
                continue
            for var in (v.strip() for v in str(key).split(",")):
                if var not in arg_names:
                    bad(key, f"'{var}' is not an argument of {op.name}", did_you_mean(var, arg_names))
            if str(entry[key]).strip() == "non_differentiable":
                continue
            aten, unknown = resolve(str(entry[key]), formula_values(op), npu_ops, helpers)
            op.aten_calls |= aten
            for message in unknown:
                bad(key, f"the formula {message}")
        if len(problems.items) != errors_before:
            continue
        try:
            formulas = {k: str(v) for k, v in entry.items() if k not in SPECIAL_KEYS}
            if "result" in entry:
                formulas["result"] = str(entry["result"])
            defn = {"name": str(entry["name"]), "dispatch": {"Default": formulas}}
            if "output_differentiability" in entry:
                defn["output_differentiability"] = list(entry["output_differentiability"])
            _, per_key = create_differentiability_info(defn, by_signature, by_schema, op_counter, set())
            op.derivative = per_key["Default"]
        except Exception as e:  # torchgen reports formula problems as exceptions
            # torchgen appends where it read the function; that is our own temporary list.
            reason = str(e).split("\n  in native_functions.yaml")[0]
            bad("name", f"torchgen rejected the entry: {reason}")
