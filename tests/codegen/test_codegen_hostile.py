"""Hostile YAML (issue 11): every mutation is a clean CodegenError with
file:line and a fix, or a generation in which nothing from the YAML escapes
the place it was put. No traceback, no hang, no injected code."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time

import pytest
from yaml_edit import ROOT, copy_project, edit

ADD_CUSTOM_DOC = "doc: Elementwise sum of two tensors of the same dtype, broadcasting their shapes."
ADD_CUSTOM = "  - func: npu_add_custom(Tensor x, Tensor y) -> Tensor\n    exec: add_custom, x, y, out"
PROBLEM_LINE = re.compile(r"^(op_plugin_functions|derivatives)\.yaml:\d+: .+: .+$")




def problems_of(codegen, root) -> list:
    with pytest.raises(codegen.CodegenError) as info:
        codegen.load_project(str(root))
    for problem in info.value.problems:
        text = str(problem)
        assert PROBLEM_LINE.match(text.split("\n")[0]), text
        assert "\n    fix: " in text and problem.fix.strip(), f"no fix: {text}"
    return [str(p) for p in info.value.problems]


def assert_rejected(codegen, root, *fragments):
    found = "\n".join(problems_of(codegen, root))
    for fragment in fragments:
        assert fragment in found, found


def ops(root):
    return root / "op_plugin_functions.yaml"


def derivatives(root):
    return root / "derivatives.yaml"


# Injection ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("formula, message", [
    ('grad * alpha + 0 * std::system("id")', "'std::system' is not allowed"),
    ("grad; system(0)", "the character ';'"),
    ("grad } int x = 1; {", "the character '}'"),
    ("grad\n#include <cstdlib>\n", "the character '#'"),
    ('not_implemented("a\\"); std::system(\\"id")', "not allowed in an expression"),
    ("grad * alpha // comment", "expected a value, found '/'"),
    ("grad.data_ptr()", "'.data_ptr' is not a tensor method"),
    ("grad * [alpha]", "expected a value, found '['"),
    ("grad + " + " + ".join(["grad"] * 3001), "characters long"),
    ("(" * 60 + "grad" + ")" * 60, "nests more than"),
    ("-" * 60 + "grad", "nests more than"),
    ("grad * 1" + "0" * 40, "is too long"),
    ("grad * alpha ? grad : grad : grad", "unexpected ':'"),
    # Found by seeded mutations of the shipped YAML (issue 23): each reached the C++ compiler or worse.
    ("grad_input_mask[7] ? grad : grad", "'grad_input_mask[7]' is out of range: here 'grad_input_mask' has 1"),
    ("grads[1] * alpha", "'grads[1]' is out of range: here 'grads' has 1 element(s)"),
    ('grad * "str"', "the string \"str\" is an operand of '*'"),
])
def test_formula_injection_is_refused(codegen, project_dir, formula, message):
    edit(derivatives(project_dir), "  y: grad * alpha", "  y: " + json.dumps(formula))
    assert_rejected(codegen, project_dir, message)


@pytest.mark.parametrize("expression, message", [
    ('npu_add_custom(x, y); std::system("id")', "the character ';'"),
    ("npu_add_custom(x, y) + x.data_ptr()", "'.data_ptr' is not a tensor method"),
    ("system(x)", "calls 'system', which is neither"),
    ("at::system(x)", "'at::system', which is not an aten operator"),
    ("std::get<0>(npu_rms_norm(x, y, 1e-6)) * eps", "uses 'eps', which is not defined here"),
])
def test_composite_injection_is_refused(codegen, project_dir, expression, message):
    edit(ops(project_dir), "    composite: npu_add_custom(x, y)", "    composite: " + json.dumps(expression))
    assert_rejected(codegen, project_dir, message)


def test_expressions_reach_cpp_only_as_rendered_from_their_parse(codegen, project_dir):
    edit(derivatives(project_dir), "  y: grad * alpha", "  y: grad*alpha+(   grad  )*0")
    project = codegen.load_project(str(project_dir))
    op = next(o for o in project.ops if o.name == "npu_scaled_add")
    formulas = [d.formula for d in op.derivative.derivatives]
    assert "grad * alpha + (grad) * 0" in formulas


HOSTILE_DOC = ')doc"); int injected = 1; R"doc( """; import os; os.system("id"); """ \\ é'


def test_doc_text_is_escaped_in_cpp_and_in_the_stub(codegen, project_dir, tmp_path_factory):
    edit(ops(project_dir), ADD_CUSTOM_DOC, "doc: " + json.dumps(HOSTILE_DOC + " Elementwise sum"))
    out = tmp_path_factory.mktemp("out")
    codegen.generate(str(project_dir), str(out))
    stub = (out / "python" / "torch_simhpu" / "__init__.pyi").read_text()
    module = ast.parse(stub)  # still one module of declarations
    fn = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "npu_add_custom")
    assert ast.get_docstring(fn).startswith(HOSTILE_DOC)
    calls = [n for n in ast.walk(module) if isinstance(n, ast.Call)]
    imports = [a.name for n in ast.walk(module) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names]
    assert "os" not in imports and not any(getattr(c.func, "attr", "") == "system" for c in calls)
    bindings = (out / "csrc" / "python_bindings.cpp").read_text()
    line = next(text for text in bindings.splitlines() if "injected" in text)
    literal = line.strip()
    assert literal.startswith('"') and literal.endswith('"')
    assert re.fullmatch(r'"(?:[^"\\]|\\.)*"', literal), literal  # one literal: every inner quote escaped
    assert "int injected" not in re.sub(r'"(?:[^"\\]|\\.)*"', "", bindings)


@pytest.mark.parametrize("value", ["npu) {} int x; TORCH_LIBRARY_FRAGMENT(npu", "aten", "Npu", "", "class", "1npu"])
def test_namespace_is_validated(codegen, project_dir, value):
    edit(ops(project_dir), "namespace: npu", f"namespace: {value!r}")
    assert_rejected(codegen, project_dir, "field 'namespace'")


# Tracebacks before: now clean problems --------------------------------------------------------

@pytest.mark.parametrize("old, new, message", [
    ("    exec: add_custom, x, y, out", "    exec: add_custom, x, y, out\n    1: x", "the key 1 is a int"),
    ("    exec: add_custom, x, y, out", "    exec: add_custom, x, y, out\n    yes: 1", "the key True is a bool"),
    ("dtypes: [float32, float64, float16, bfloat16]\n    doc: Elementwise sum",
     "dtypes: [[float32]]\n    doc: Elementwise sum", "unknown dtype \"['float32']\""),
    ("dtypes: [float32, float64, float16, bfloat16]\n    doc: Elementwise sum",
     "dtypes: [float32, float32]\n    doc: Elementwise sum", "dtype 'float32' is listed twice"),
    ('checks: ["last_dim(x, gamma)"]', "checks: 5", "expected a list of checks, got 5"),
    ('checks: ["last_dim(x, gamma)"]', 'checks: "last_dim(x, gamma)"', "expected a list of checks"),
    ("npu_add_custom(Tensor x, Tensor y)", "npu_add_custom(Tensor x, Tensor lambda)", "'lambda' is a C++ or Python"),
    ("npu_add_custom(Tensor x, Tensor y)", "npu_add_custom(Tensor x, Tensor from)", "'from' is a C++ or Python"),
    ("npu_add_custom(Tensor x, Tensor y)", "npu_add_custom(Tensor x, Tensor class)", "'class' is a C++ or Python"),
    ("float eps=1e-06) -> (Tensor y", "float eps=inf) -> (Tensor y", "inf and nan cannot be defaults"),
    ("float eps=1e-06) -> (Tensor y", "float eps=nan) -> (Tensor y", "inf and nan cannot be defaults"),
    ("float eps=1e-06) -> (Tensor y", "float eps=1e-06, ScalarType? zz=float) -> (Tensor y",
     "argument 'zz' (ScalarType?) can only default to None"),
    ("float eps=1e-06) -> (Tensor y", "float eps=1e-06, int zz='a') -> (Tensor y", "not a valid int"),
    ("float eps=1e-06) -> (Tensor y", "float eps=1e-06, int zz=99999999999999999999) -> (Tensor y",
     "not a valid int"),
    ("float eps=1e-06) -> (Tensor y", 'float eps=1e-06, str zz="a\\\\nb") -> (Tensor y', "not a valid str"),
    ("float eps=1e-06) -> (Tensor y", "float eps=1e-06, int[2] zz=[1,2,3]) -> (Tensor y",
     "of 3 value(s) where the type holds 2"),
    ("npu_add_custom(Tensor x", "npu_" + "a" * 250 + "(Tensor x", "characters long; at most 64"),
    ("npu_add_custom(Tensor x", "npu_add\u200bcustom(Tensor x", "invisible or control character U+200B"),
    ("npu_add_custom(Tensor x, Tensor y)", "npu_add_custom(Tensor x, Tensor y\u200b)", "U+200B"),
    (ADD_CUSTOM_DOC, "doc: \"Elementwise \\u202e sum\"", "invisible or control character"),
])
def test_mutations_that_raised_tracebacks_are_problems(codegen, project_dir, old, new, message):
    edit(ops(project_dir), old, new)
    assert_rejected(codegen, project_dir, message)


@pytest.mark.parametrize("argument", ["out", "kOpName", "grad_fn", "result", "_op", "x_", "self_", "at", "m"])
def test_argument_names_that_collide_with_generated_code(codegen, project_dir, argument):
    edit(ops(project_dir), "npu_add_custom(Tensor x, Tensor y)", f"npu_add_custom(Tensor x, Tensor {argument})")
    assert_rejected(codegen, project_dir, f"'{argument}'")


@pytest.mark.parametrize("old, new, message", [
    ("npu_rms_norm(Tensor x, Tensor gamma, float eps=1e-06) -> (Tensor y, Tensor rstd)",
     "npu_rms_norm(Tensor x, Tensor gamma, float eps=1e-06) -> (Tensor y, Tensor y)", "'y' is used twice"),
    ("npu_rms_norm(Tensor x, Tensor gamma, float eps=1e-06) -> (Tensor y, Tensor rstd)",
     "npu_rms_norm(Tensor x, Tensor gamma, float eps=1e-06) -> (Tensor x, Tensor rstd)", "'x' is used twice"),
    ("exec: rms_norm, x, gamma, eps, y, rstd", "exec: rms_norm, gamma, x, eps, y, rstd", None),
    ("exec: rms_norm, x, gamma, eps, y, rstd", "exec: rms_norm, x, eps, gamma, y, rstd",
     "'eps' (float) is passed to the kernel's parameter 'gamma'"),
    ("exec: rms_norm, x, gamma, eps, y, rstd", "exec: rms_norm, x, gamma, y, rstd", "takes 5 argument(s)"),
    ("exec: rms_norm, x, gamma, eps, y, rstd", "exec: rms_norm, x, gamma, eps, eps, y, rstd",
     "kernel 'rms_norm' takes 5 argument(s)"),
    ("exec: rms_norm, x, gamma, eps, y, rstd", "exec: rms_norm, y, gamma, eps, x, rstd", "must come last"),
    # An output passed as an input too: the kernel would read memory nothing wrote.
    ("exec: add_custom, x, y, out", "exec: add_custom, x, out, out", "must come last, in order, and only once"),
    ("composite: npu_add_custom(x, y)", 'composite: npu_add_custom(x, y)\n    checks: ["same_shape(x, y)"]',
     "a composite op checks nothing itself"),
])
def test_exec_arguments_checked_against_the_kernel(codegen, project_dir, old, new, message):
    edit(ops(project_dir), old, new)
    if message is None:  # same kinds swapped: nothing to tell them apart by, so it is accepted
        codegen.load_project(str(project_dir))
        return
    assert_rejected(codegen, project_dir, message)


def test_composite_cycle(codegen, project_dir):
    edit(ops(project_dir), "    composite: std::get<0>(npu_rms_norm(x, gamma, eps)) * scale",
         "    composite: npu_add_custom_v0(x, x) * scale")
    edit(ops(project_dir), "    composite: npu_add_custom(x, y)", "    composite: npu_rms_norm_scaled(x, y, 1.0, 1e-6)")
    assert_rejected(codegen, project_dir, "composite operators call each other in a cycle: "
                    "npu_rms_norm_scaled -> npu_add_custom_v0 -> npu_rms_norm_scaled")


@pytest.mark.parametrize("old, new, message", [
    ("func: mul.Tensor(Tensor self, Tensor other) -> Tensor", "func: mul.Tensr(Tensor self, Tensor other) -> Tensor",
     "'mul.Tensr' is not an aten operator"),
    ("func: mul.Tensor(Tensor self, Tensor other) -> Tensor", "func: frobnicate(Tensor self, Tensor other) -> Tensor",
     "'frobnicate' is not an aten operator"),
    ("func: mul.Tensor(Tensor self, Tensor other) -> Tensor", "func: mul.Tensor(Tensor self, Tensor other2) -> Tensor",
     "the schema differs from aten's"),
    ("func: mul.Tensor(Tensor self, Tensor other) -> Tensor",
     "func: mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)", "official entries run functional aten ops"),
])
def test_official_entries_must_be_the_aten_op(codegen, project_dir, old, new, message):
    edit(ops(project_dir), old, new)
    assert_rejected(codegen, project_dir, message)


def test_deprecated_must_name_a_declared_op(codegen, project_dir):
    edit(ops(project_dir), "    deprecated: npu_add_custom", "    deprecated: npu_add_custom2")
    assert_rejected(codegen, project_dir, "names 'npu_add_custom2' as the operator to use instead")


@pytest.mark.parametrize("old, new, message", [
    ("  output_differentiability: [True, False]", "  output_differentiability: [True]",
     "expected a list of 2 true/false value(s)"),
    ("  output_differentiability: [True, False]", "  output_differentiability: [True, 1]",
     "expected a list of 2 true/false value(s)"),
    ("  output_differentiability: [True, False]", "  output_differentiability: True", "expected a list of 2"),
    ("  self: sum_dims_backward(", "  self, keepdim: sum_dims_backward(", "'keepdim' is bool, not a Tensor"),
    ("  self: sum_dims_backward(", "  dim: sum_dims_backward(", "'dim' is int[1], not a Tensor"),
])
def test_derivative_entry_mistakes(codegen, project_dir, old, new, message):
    edit(derivatives(project_dir), old, new)
    assert_rejected(codegen, project_dir, message)


def test_derivative_problems_are_reported_with_the_ops_files_problems(codegen, project_dir):
    edit(ops(project_dir), "dtypes: [float32, float64, float16, bfloat16]\n    doc: Elementwise sum",
         "dtypes: [float32, floot]\n    doc: Elementwise sum")
    edit(derivatives(project_dir), "  y: grad * alpha", "  y: grad * alpah")
    assert_rejected(codegen, project_dir, "unknown dtype 'floot'", "uses 'alpah', which is not defined here")


def test_schema_problem_does_not_hide_the_entrys_other_problems(codegen, project_dir):
    edit(ops(project_dir), "npu_add_custom(Tensor x, Tensor y)", "npu_add_custom(Tensor x, Tensr y)")
    edit(ops(project_dir), "dtypes: [float32, float64, float16, bfloat16]\n    doc: Elementwise sum",
         "dtypes: [float32, floot]\n    doc: Elementwise sum")
    assert_rejected(codegen, project_dir, "schema does not parse", "unknown dtype 'floot'")


def test_entries_that_are_not_mappings_are_reported_at_their_line(codegen, project_dir):
    edit(ops(project_dir), ADD_CUSTOM, "  - just a string\n" + ADD_CUSTOM)
    found = problems_of(codegen, project_dir)
    line = ops(project_dir).read_text().splitlines().index("  - just a string") + 1
    assert any(p.startswith(f"op_plugin_functions.yaml:{line}: (custom entry)") for p in found), found


# The file itself -------------------------------------------------------------------------------

def test_yaml_alias_bomb_is_refused_at_once(codegen, project_dir):
    bomb = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        bomb.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]")
    ops(project_dir).write_text("\n".join(bomb) + "\n")
    start = time.monotonic()
    assert_rejected(codegen, project_dir, "YAML alias '*a' is not allowed")
    assert time.monotonic() - start < 5


def test_non_utf8_bytes_are_reported_with_their_line(codegen, project_dir):
    data = ops(project_dir).read_bytes().replace(b"Elementwise sum", b"Elementwise \xff sum", 1)
    ops(project_dir).write_bytes(data)
    line = data[:data.index(b"\xff")].count(b"\n") + 1
    assert_rejected(codegen, project_dir, f"op_plugin_functions.yaml:{line}: (file): byte 0xff is not UTF-8")


def test_missing_derivatives_file_and_a_directory_as_the_ops_file(codegen, project_dir):
    derivatives(project_dir).unlink()
    assert_rejected(codegen, project_dir, "derivatives.yaml:1: (file): the file does not exist")
    ops(project_dir).unlink()
    ops(project_dir).mkdir()
    assert_rejected(codegen, project_dir, "is a directory, not a YAML file")


# The command line --------------------------------------------------------------------------------

def run_codegen(*args, cwd=ROOT, stdout=subprocess.PIPE, shell_tail=""):
    env = dict(os.environ, PYTHONPATH=ROOT)
    if shell_tail:
        command = " ".join([sys.executable, "-m", "codegen", *args]) + shell_tail
        return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_misuse_is_explained_without_a_traceback(project_dir, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    cases = [
        (("--root", "/nonexistent", "check"), "is not a folder"),
        (("--root", str(elsewhere), "check"), "holds no op_plugin_functions.yaml"),
        (("--root", str(project_dir), "generate", "--out", "op_plugin_functions.yaml"), "is a file; give a folder"),
        (("--root", str(project_dir), "new-op", "class"), "'class' is a C++ or Python keyword"),
        (("--root", str(project_dir), "new-op", "add_custom"), "npu_add_custom is already declared"),
    ]
    for args, message in cases:
        out = run_codegen(*args, cwd=elsewhere)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
    assert not (project_dir / "csrc" / "kernels" / "class.cpp").exists()


def test_list_into_a_closed_pipe_is_quiet(project_dir):
    out = run_codegen("--root", str(project_dir), "list", shell_tail=" | head -1")
    assert out.stdout.count("\n") == 1 and out.stderr == "", out.stderr


def test_failed_docs_run_keeps_the_previous_docs(project_dir):
    assert run_codegen("--root", str(project_dir), "docs").returncode == 0
    before = (project_dir / "docs" / "ops.md").read_text()
    edit(ops(project_dir), "dtypes: [float32, float64, float16, bfloat16]\n    doc: Elementwise sum",
         "dtypes: [floot]\n    doc: Elementwise sum")
    out = run_codegen("--root", str(project_dir), "docs")
    assert out.returncode == 1 and "unknown dtype 'floot'" in out.stderr
    assert (project_dir / "docs" / "ops.md").read_text() == before


def test_new_op_writes_nothing_when_the_project_would_not_validate(project_dir):
    edit(derivatives(project_dir), "  y: grad * alpha", "  y: grad * alpah")
    before = {p: p.read_bytes() for p in (ops(project_dir), derivatives(project_dir))}
    out = run_codegen("--root", str(project_dir), "new-op", "fresh_op")
    assert out.returncode == 2 and "cannot be added as scaffolded" in out.stderr
    assert {p: p.read_bytes() for p in before} == before
    assert not (project_dir / "csrc" / "kernels" / "fresh_op.cpp").exists()


def test_concurrent_generate_runs_do_not_collide(project_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("gen")
    stale = out / "csrc" / "ops"  # a layout codegen no longer writes: every run sweeps it
    stale.mkdir(parents=True)
    for i in range(50):
        (stale / f"npu_gone_{i}.cpp").write_text("// from an older build\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    runs = [subprocess.Popen([sys.executable, "-m", "codegen", "--root", str(project_dir), "generate", "--out", str(out)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for run in runs:
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
    assert not list(out.rglob("*.tmp")) and not list(stale.iterdir())
    assert (out / "csrc" / "python_bindings.cpp").read_text().count("m.def(") > 5


def test_torchgen_keyword_formulas_still_pass(codegen, project_dir):
    edit(derivatives(project_dir), "  self: swish_backward(grad, self, beta)",
         "  self: swish_backward(grad, self, beta)\n  result: auto_element_wise")
    project = codegen.load_project(str(project_dir))
    swish = next(op for op in project.ops if op.name == "npu_swish")
    # torchgen's expansion of the keyword: the backward formula applied to the tangent
    [forward] = swish.derivative.forward_derivatives
    assert forward.var_names == ("result",)
    assert forward.formula == "(swish_backward(self_t.conj(), self_p, beta)).conj()"


def test_custom_entries_may_not_annotate_aliasing(codegen, project_dir):
    edit(ops(project_dir), "npu_add_custom(Tensor x, Tensor y) -> Tensor", "npu_add_custom(Tensor(a!) x, Tensor y) -> Tensor")
    assert_rejected(codegen, project_dir, "no alias annotations")


def test_an_oversized_yaml_file_is_refused_unread(codegen, project_dir):
    with open(ops(project_dir), "a") as f:
        f.write("# padding\n" * 600_000)  # about 6 MB
    assert_rejected(codegen, project_dir, "op_plugin_functions.yaml:1: (file): is larger than 4 MiB")


@pytest.mark.parametrize("name,message", [
    ("Add-RMS", "expected the name of a function in op_plugin/, got 'Add-RMS'"),
    ("[x]", "expected the name of a function in op_plugin/"),
    ("add_rms_nrom", "no adapter 'add_rms_nrom' is registered under op_plugin/ (SIMHPU_OP_PLUGIN(add_rms_nrom))"),
])
def test_adapter_must_name_a_registered_op_plugin_function(codegen, project_dir, name, message):
    edit(ops(project_dir), "adapter: add_rms_norm", f"adapter: {name}")
    assert_rejected(codegen, project_dir, "npu_add_rms_norm: field 'adapter': " + message)


def test_adapter_entries_need_out_and_dtypes(codegen, project_dir):
    edit(ops(project_dir), "    dtypes: [float32, float64, float16, bfloat16]\n    variants: [out]\n    doc: >-\n"
         "      Residual add", "    variants: [out]\n    doc: >-\n      Residual add")
    assert_rejected(codegen, project_dir, "npu_add_rms_norm: field 'dtypes': missing required field")
