"""Renders the validated model through the jinja2 templates in templates/.

Files are rewritten only when their content changes, so ninja recompiles just
the translation units an edit touched; files of operators that no longer exist
are removed.
"""
from __future__ import annotations

import os
import re

import jinja2
from torchgen.api import cpp

from . import rules as rule_lang
from .model import OpDecl, Project
from .types import (base_type, binding_param, cpp_default, dispatcher_signature, python_default,
                    stub_type)

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def _saved_field(saved, is_output: bool) -> dict:
    """How a value torchgen says the backward needs is stored on the Node."""
    name = saved.nctype.name
    ctype = saved.nctype.type.remove_const_ref().cpp_type()
    if ctype in ("at::Tensor", "::std::optional<at::Tensor>"):
        return {"name": name, "tensor": True, "decl": f"torch::autograd::SavedVariable {name}_",
                "field": f"{name}_", "expr": saved.expr, "is_output": is_output}
    vector_of = {"c10::SymIntArrayRef": "c10::SymInt", "at::IntArrayRef": "int64_t"}
    if ctype in vector_of:
        return {"name": name, "tensor": False, "decl": f"std::vector<{vector_of[ctype]}> {name}",
                "field": name, "expr": f"{saved.expr}.vec()", "is_output": is_output}
    if ctype == "c10::string_view":
        ctype = "std::string"
    return {"name": name, "tensor": False, "decl": f"{ctype} {name}", "field": name,
            "expr": saved.expr, "is_output": is_output}


def _autograd_view(op: OpDecl) -> dict | None:
    info = op.derivative
    if info is None:
        return None
    diff_args = [a.name for a in info.args_with_derivatives]
    n_returns = len(op.schema.returns)
    differentiable = info.output_differentiability or [True] * n_returns
    return_names = [n if n != "self" else "result" for n in cpp.return_names(info.func)]
    derivatives = []
    for d in info.derivatives:
        derivatives.append({"formula": d.formula, "slots": [diff_args.index(v) for v in d.var_names]})
    saved = [_saved_field(s, False) for s in info.all_saved_inputs]
    saved_outputs = []
    for s in info.all_saved_outputs:
        index = return_names.index(s.nctype.name)
        saved_outputs.append(dict(_saved_field(s, bool(differentiable[index])), index=index))
    formulas = " ".join(d.formula for d in info.derivatives)
    return {
        "node": info.op,
        "diff_args": diff_args,
        "single_grad": sum(bool(x) for x in differentiable) == 1,
        "derivatives": derivatives,
        "saved": saved,
        "saved_outputs": saved_outputs,
        "differentiable_outputs": [i for i, d in enumerate(differentiable) if d],
        "return_names": return_names,
        "aten_includes": sorted(set(re.findall(r"\bat::(\w+)\(", formulas))),
    }


def _op_view(op: OpDecl, namespace: str) -> dict:
    returns, params, fn_type = dispatcher_signature(op.schema)
    args = list(op.schema.arguments.flat_all)
    tensors = [a.name for a in args if base_type(a) == "Tensor"]
    optional_tensors = [a.name for a in args if base_type(a) == "Tensor?"]
    outputs = [{"name": o.name, "size": rule_lang.to_cpp(o.size), "dtype": rule_lang.to_cpp(o.dtype),
                "size_py": rule_lang.to_python(o.size), "dtype_py": rule_lang.to_python(o.dtype)}
               for o in op.outputs]
    # The kernel sees contiguous copies when the entry asks for them.
    operand = {t: (f"{t}.contiguous()" if op.contiguous else t) for t in tensors}
    if op.kind == "official":
        operand = {t: f"{t}_" for t in tensors}
    exec_args = [operand.get(a, a) for a in op.exec_args]
    out_names = [o["name"] for o in outputs]
    bindings = []
    for a in args:
        ptype, convert = binding_param(a, op.name)
        bindings.append({"name": a.name, "ptype": ptype, "convert": convert,
                         "kw_only": a in op.schema.arguments.flat_kwarg_only,
                         "default": None if a.default is None else cpp_default(a),
                         "stub_type": stub_type(a),
                         "py_default": None if a.default is None else python_default(a)})
    return {
        "op": op,
        "name": op.name,
        "base_name": str(op.schema.name.name),
        "overload": op.schema.name.overload_name,
        "cpp_name": op.cpp_name,
        "namespace": namespace,
        "schema": str(op.schema),
        "returns": returns,
        "fn_type": fn_type,
        "params": ", ".join(f"{t} {n}" for t, n in params),
        "arg_names": [n for _, n in params],
        "bindings": bindings,
        "tensors": tensors,
        "optional_tensors": optional_tensors,
        "first": tensors[0] if tensors else None,
        "dtypes": ", ".join(rule_lang.DTYPES[d][0] for d in op.dtypes),
        "checks": [rule_lang.to_cpp(c) for c in op.checks],
        "checks_py": [rule_lang.to_python(c) for c in op.checks],
        "outputs": outputs,
        "exec_args": exec_args,
        "return_expr": out_names[0] if len(out_names) == 1 else "{" + ", ".join(out_names) + "}",
        "stub_returns": "Tensor" if len(outputs) == 1 else "tuple[" + ", ".join(["Tensor"] * len(outputs)) + "]",
        "autograd": _autograd_view(op),
    }


def render(project: Project) -> dict[str, str]:
    """Every generated file, relative path -> content."""
    env = _environment()
    views = [_op_view(op, project.namespace) for op in project.ops]
    custom = [v for v in views if v["op"].kind == "custom"]
    context = {"project": project, "ops": views, "custom_ops": custom}
    files = {}
    for view in views:
        template = "official_op.cpp.j2" if view["op"].kind == "official" else "custom_op.cpp.j2"
        files[f"csrc/ops/{view['cpp_name']}.cpp"] = env.get_template(template).render(context, **view)
    files["include/generated/npu_ops.h"] = env.get_template("npu_ops.h.j2").render(context)
    files["csrc/python_bindings.cpp"] = env.get_template("python_bindings.cpp.j2").render(context)
    files["python/torch_simhpu/_generated/__init__.py"] = env.get_template("generated_init.py.j2").render(context)
    files["python/torch_simhpu/_generated/fake.py"] = env.get_template("fake.py.j2").render(context)
    files["python/torch_simhpu/_generated/compile.py"] = env.get_template("compile.py.j2").render(context)
    files["python/torch_simhpu/__init__.pyi"] = env.get_template("stub.pyi.j2").render(context)
    files["docs/ops.md"] = env.get_template("ops.md.j2").render(context)
    return files


def write_tree(out_dir: str, files: dict[str, str]) -> list[str]:
    """Write `files` under out_dir, touching only changed ones; returns what changed."""
    changed = []
    for rel, content in files.items():
        path = os.path.join(out_dir, rel)
        try:
            with open(path) as f:
                if f.read() == content:
                    continue
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(content)
        os.replace(tmp, path)
        changed.append(rel)
    ops_dir = os.path.join(out_dir, "csrc", "ops")
    if os.path.isdir(ops_dir):
        for name in os.listdir(ops_dir):
            if f"csrc/ops/{name}" not in files:
                os.remove(os.path.join(ops_dir, name))
                changed.append(f"csrc/ops/{name} (removed)")
    return changed
