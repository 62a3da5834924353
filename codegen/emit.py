"""Renders the validated model through the jinja2 templates in templates/.

Files are rewritten only when their content changes, so ninja recompiles just
the translation units an edit touched; files of operators that no longer exist
are removed.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile

import jinja2
from torchgen.api import cpp
from torchgen.model import FunctionSchema
from torchgen.native_function_generation import functional_to_out_signature

from . import rules as rule_lang
from .model import OpDecl, Project, output_names
from .types import (base_type, binding_param, cpp_default, dispatcher_signature, python_default,
                    stub_type)

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")


def cpp_string(text: str, indent: str = "      ") -> str:
    """`text` as C++ string literals, one per line (adjacent literals join):
    quotes, backslashes and everything outside printable ASCII escaped, so no
    text from the YAML can end the literal."""
    def escape(char: str) -> str:
        if char in '"\\':
            return "\\" + char
        if " " <= char <= "~":
            return char
        return "".join(f"\\{byte:03o}" for byte in char.encode("utf-8"))  # octal: always 3 digits
    lines = text.split("\n")
    literals = ['"' + "".join(escape(c) for c in line) + ("\\n" if i < len(lines) - 1 else "") + '"'
                for i, line in enumerate(lines)]
    return ("\n" + indent).join(literals)


def py_docstring(text: str) -> str:
    """`text` safe inside a triple-quoted Python string."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n" or char.isprintable():
            out.append(char)
        else:
            out.append(f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}")
    return "".join(out)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["cpp_string"] = cpp_string
    env.filters["py_docstring"] = py_docstring
    return env


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
        derivatives.append({"formula": d.formula, "slots": [diff_args.index(v) for v in d.var_names],
                            "uses_mask": "grad_input_mask" in d.formula})
    saved = [_saved_field(s, False) for s in info.all_saved_inputs]
    saved_outputs = []
    for s in info.all_saved_outputs:
        index = return_names.index(s.nctype.name)
        saved_outputs.append(dict(_saved_field(s, bool(differentiable[index])), index=index))
    tensor_args = [a.name for a in op.schema.arguments.flat_all if base_type(a.type).startswith("Tensor")]
    skipped = set(diff_args) | set(info.non_differentiable_arg_names)
    return {
        "node": info.op,
        "diff_args": diff_args,
        "no_formula_args": [a for a in tensor_args if a not in skipped],
        "single_grad": sum(bool(x) for x in differentiable) == 1,
        "derivatives": derivatives,
        "saved": saved,
        "saved_outputs": saved_outputs,
        "differentiable_outputs": [i for i, d in enumerate(differentiable) if d],
        "return_names": return_names,
        "aten_calls": sorted(op.aten_calls),
        "output_shapes": sum(bool(x) for x in differentiable) > 1,
    }


def out_schema(schema: FunctionSchema) -> FunctionSchema:
    """The out= variant, its out arguments named like the functional op's outputs."""
    out = functional_to_out_signature(schema)
    renamed = tuple(dataclasses.replace(a, name=n) for a, n in zip(out.arguments.out, output_names(schema)))
    return dataclasses.replace(out, arguments=dataclasses.replace(out.arguments, out=renamed))


def inplace_schema(schema: FunctionSchema) -> FunctionSchema:
    """The in-place variant: writes into its first argument, `self`."""
    args = str(schema.arguments)
    assert args.startswith("Tensor self")
    return FunctionSchema.parse(f"{schema.name.name.base}_(Tensor(a!) self{args[len('Tensor self'):]}) -> Tensor(a!)")


def _mutating_view(schema: FunctionSchema) -> dict:
    """A mutating variant, registered as returning nothing.

    torch.compile's functionalization accepts custom ops that mutate their
    arguments but not ones whose outputs alias them, so the schema ends in
    `-> ()` (torchgen's model, made for aten, cannot express that for out=
    ops, hence the rewrite after it computed the argument types). The Python
    functions still return the tensors they wrote."""
    view = _signature_view(schema)
    view["schema"] = view["schema"].rsplit(" -> ", 1)[0] + " -> ()"
    view["fn_type"] = "void" + view["fn_type"][len(view["returns"]):]
    view["returns"] = "void"
    return view


def _signature_view(schema: FunctionSchema) -> dict:
    returns, params, fn_type = dispatcher_signature(schema)
    return {
        "schema": str(schema),
        "name": str(schema.name),
        "base_name": str(schema.name.name),
        "overload": schema.name.overload_name,
        "cpp_name": str(schema.name).replace(".", "_"),
        "returns": returns,
        "fn_type": fn_type,
        "params": ", ".join(f"{t} {n}" for t, n in params),
        "arg_names": [n for _, n in params],
    }


def _bindings(op: OpDecl) -> list[dict]:
    bindings = []
    for a in op.schema.arguments.flat_all:
        ptype, convert = binding_param(a, op.name)
        bindings.append({"name": a.name, "ptype": ptype, "convert": convert,
                         "kw_only": a in op.schema.arguments.flat_kwarg_only,
                         "default": None if a.default is None else cpp_default(a),
                         "stub_type": stub_type(a),
                         "py_default": None if a.default is None else python_default(a)})
    return bindings


def _promoted(op: OpDecl) -> list[str]:
    """Tensor arguments cast to the promoted dtype before the kernel runs."""
    for o in op.outputs:
        if o.dtype.fn == "promote":
            return o.dtype.arg_names()
    return []


def _op_view(op: OpDecl, namespace: str) -> dict:
    args = list(op.schema.arguments.flat_all)
    tensors = [a.name for a in args if base_type(a.type) == "Tensor"]
    other_tensors = [a.name for a in args if base_type(a.type) in ("Tensor?", "Tensor[]")]
    promoted = _promoted(op)
    written = {o.name for o in op.outputs}
    outputs = [{"name": o.name, "size": rule_lang.to_cpp(o.size), "dtype": rule_lang.to_cpp(o.dtype),
                "size_py": rule_lang.to_python(o.size), "dtype_py": rule_lang.to_python(o.dtype),
                "text": o.text}
               for o in op.outputs]
    operands = {}
    for t in tensors:
        expr = f"{t}_" if (op.kind == "official" or t in promoted) else t
        operands[t] = f"{expr}.contiguous()" if op.contiguous else expr
    checks = [(rule_lang.to_cpp(c), rule_lang.to_python(c)) for c in op.checks]
    if op.elementwise and op.outputs[0].size.fn not in ("broadcast", "same"):
        # The kernel broadcasts its inputs to a declared output shape: check they do.
        size_cpp, size_py = rule_lang.to_cpp(op.outputs[0].size), rule_lang.to_python(op.outputs[0].size)
        for t in op.elementwise.tensors:
            checks.append((f'rules::check_broadcastable(kOpName, "{t}", {t}, {size_cpp})',
                           f'_rules.check_broadcastable(_op, "{t}", {t}, {size_py})'))
    view = _signature_view(op.schema)
    view.update({
        "self_view": _signature_view(op.schema),
        "op": op,
        "namespace": namespace,
        "bindings": _bindings(op),
        "tensors": tensors,
        "other_tensors": other_tensors,
        "promoted": promoted,
        "first": tensors[0],
        "dtypes": ", ".join(rule_lang.DTYPES[d][0] for d in op.dtypes),
        "checks": [cpp for cpp, _ in checks],
        "checks_py": [py for _, py in checks],
        "outputs": outputs,
        "exec_args": [f"written({a})" if a in written else operands.get(a, a) for a in op.exec_args],
        "return_expr": outputs[0]["name"] if len(outputs) == 1 else "{" + ", ".join(o["name"] for o in outputs) + "}",
        "stub_returns": "Tensor" if len(op.schema.returns) == 1 else
        "tuple[" + ", ".join(["Tensor"] * len(op.schema.returns)) + "]",
        "autograd": _autograd_view(op),
        "elementwise": _elementwise_view(op),
        "out_variant": _mutating_view(out_schema(op.schema)) if "out" in op.variants else None,
        "inplace_variant": _mutating_view(inplace_schema(op.schema)) if "inplace" in op.variants else None,
    })
    return view


def _elementwise_view(op: OpDecl) -> dict | None:
    kernel = op.elementwise
    if kernel is None:
        return None
    params = [f"const DeviceTensor& {t}" for t in kernel.tensors]
    numbers = []
    for name, schema_type in kernel.numbers:
        ctype = {"float": "double", "int": "int64_t", "SymInt": "int64_t", "bool": "bool",
                 "Scalar": "const c10::Scalar&"}[schema_type]
        params.append(f"{ctype} {name}")
        convert = f"{name}.to<acc_t>()" if schema_type == "Scalar" else f"static_cast<acc_t>({name})"
        numbers.append({"name": name, "convert": convert})
    return {
        "kernel": op.kernel,
        "expression": kernel.expression,
        "cpp": kernel.cpp,
        "params": ", ".join(params + ["const DeviceTensor& out"]),
        "args": ", ".join([*kernel.tensors, *(n for n, _ in kernel.numbers), "out"]),
        "tensors": kernel.tensors,
        "numbers": numbers,
        "dtypes": [(rule_lang.DTYPES[d][0], rule_lang.DTYPES[d][2]) for d in op.dtypes],
    }


def render(project: Project) -> dict[str, str]:
    """Every generated file, relative path -> content."""
    env = _environment()
    views = [_op_view(op, project.namespace) for op in project.ops]
    custom = [v for v in views if v["op"].kind == "custom"]
    context = {"project": project, "ops": views, "custom_ops": custom}
    files = {}
    for view in views:
        template = {"official": "official_op.cpp.j2", "custom": "custom_op.cpp.j2"}[view["op"].kind]
        if view["op"].composite is not None:
            template = "composite_op.cpp.j2"
        files[f"csrc/ops/{view['cpp_name']}.cpp"] = env.get_template(template).render(context, **view)
    files["include/generated/npu_ops.h"] = env.get_template("npu_ops.h.j2").render(context)
    files["csrc/python_bindings.cpp"] = env.get_template("python_bindings.cpp.j2").render(context)
    files["python/torch_simhpu/_generated/__init__.py"] = env.get_template("generated_init.py.j2").render(context)
    files["python/torch_simhpu/_generated/fake.py"] = env.get_template("fake.py.j2").render(context)
    files["python/torch_simhpu/_generated/compile.py"] = env.get_template("compile.py.j2").render(context)
    files["python/torch_simhpu/__init__.pyi"] = env.get_template("stub.pyi.j2").render(context)
    files["docs/ops.md"] = env.get_template("ops.md.j2").render(context)
    return files


def write_file(path: str, content: str) -> bool:
    """Write `path` atomically if its content differs; True if it changed. A
    temporary file of its own per call, so concurrent runs never share one."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == content:
                return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".codegen-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return True


def write_tree(out_dir: str, files: dict[str, str]) -> list[str]:
    """Write `files` under out_dir, touching only changed ones; returns what changed."""
    changed = []
    for rel, content in files.items():
        if write_file(os.path.join(out_dir, rel), content):
            changed.append(rel)
    ops_dir = os.path.join(out_dir, "csrc", "ops")
    if os.path.isdir(ops_dir):
        for name in os.listdir(ops_dir):
            if f"csrc/ops/{name}" not in files:
                os.remove(os.path.join(ops_dir, name))
                changed.append(f"csrc/ops/{name} (removed)")
    return changed
