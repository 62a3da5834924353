"""codegen from the source tree: validation messages with file:line, and
generation that rewrites only what changed."""
import os
import re
import shutil

import pytest
from yaml_edit import copy_project, edit, line_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))





def remove_block(path, start):
    """Remove the YAML list item that begins with `start`, up to the next blank line."""
    text = path.read_text()
    begin = text.index(start)
    end = text.find("\n\n", begin)
    path.write_text(text[:begin] + (text[end + 2:] if end != -1 else ""))


def problems(codegen, root):
    with pytest.raises(Exception) as info:
        codegen.load_project(str(root))
    return str(info.value)


def test_the_project_yaml_is_valid(codegen):
    project = codegen.load_project(ROOT)
    assert {op.name for op in project.custom_ops} >= {"npu_add_custom", "npu_rms_norm", "npu_sum_dims"}
    assert {op.name for op in project.official_ops} == {"add.Tensor", "mul.Tensor", "index_select", "gather"}


@pytest.mark.parametrize("old,new,field,message", [
    ("    dtypes: [float32, float64, float16, bfloat16]\n    doc: Elementwise sum",
     "    dtype: [float32, float64, float16, bfloat16]\n    doc: Elementwise sum",
     "dtype", "unknown field\n    fix: did you mean 'dtypes'?"),
    ("func: npu_add_custom(Tensor x, Tensor y) -> Tensor", "func: npu_add_custom(Tensor x, Tensr y) -> Tensor",
     "func", "schema does not parse"),
    ("exec: add_custom, x, y, out", "exec: add_custon, x, y, out",
     "exec", "no kernel 'add_custon' is registered under csrc/kernels (SIMHPU_KERNEL(add_custon))\n"
             "    fix: did you mean 'add_custom'?"),
    ("exec: add_custom, x, y, out", "exec: add_custom, x, z, out",
     "exec", "'z' is neither an argument nor an output of npu_add_custom (outputs: out)"),
    ('out: {size: "broadcast(x, y)", dtype: x}\n    dtypes: [float32, float64, float16, bfloat16]\n    doc: Elem',
     'out: {size: "broadcast(x, w)", dtype: x}\n    dtypes: [float32, float64, float16, bfloat16]\n    doc: Elem',
     "out", "output 'out': broadcast: 'w' is not an argument of the schema"),
    ("dtypes: [float32, float64, float16, bfloat16]\n    doc: Elementwise sum",
     "dtypes: [float32, float46, float16, bfloat16]\n    doc: Elementwise sum",
     "dtypes", "unknown dtype 'float46'\n    fix: did you mean 'float64'?"),
])
def test_invalid_entries_report_file_line_entry_field(codegen, project_dir, old, new, field, message):
    yaml_path = project_dir / "op_plugin_functions.yaml"
    edit(yaml_path, old, new)
    line = line_of(yaml_path, new.split("\n")[0].strip())
    text = problems(codegen, project_dir)
    entry = "npu_add_custom"
    assert f"op_plugin_functions.yaml:{line}: {entry}: field '{field}': {message}" in text


def test_duplicate_operator(codegen, project_dir):
    yaml_path = project_dir / "op_plugin_functions.yaml"
    text = yaml_path.read_text()
    start = text.index("  - func: npu_swish")
    end = text.index("  - func: npu_rms_norm(")
    yaml_path.write_text(text + text[start:end])
    assert "npu_swish: field 'func': operator declared twice (first at line" in problems(codegen, project_dir)


def test_missing_field_and_several_problems_in_one_run(codegen, project_dir):
    yaml_path = project_dir / "op_plugin_functions.yaml"
    edit(yaml_path, "    exec: swish, self, beta, out\n", "")
    edit(yaml_path, "exec: sum_dims, self, dim, keepdim, out", "exec: sum_dims, self, dims, keepdim, out")
    text = problems(codegen, project_dir)
    assert text.startswith("2 problems in the operator YAML:")
    assert ("npu_swish: field 'exec': missing required field\n    fix: add 'exec: KERNEL, args..., out', "
            "'elementwise: EXPRESSION', 'composite: EXPRESSION' or 'adapter: NAME'") in text
    assert "npu_sum_dims: field 'exec': 'dims' is neither an argument nor an output" in text


def test_derivative_for_unknown_operator_and_argument(codegen, project_dir):
    path = project_dir / "derivatives.yaml"
    edit(path, "- name: npu_swish(Tensor self, float beta=1.0) -> Tensor",
         "- name: npu_swissh(Tensor self, float beta=1.0) -> Tensor")
    edit(path, "  x: grad\n  y: grad * alpha", "  x: grad\n  z: grad * alpha")
    text = problems(codegen, project_dir)
    swish_line = line_of(path, "npu_swissh")
    z_line = line_of(path, "  z: grad * alpha")
    assert (f"derivatives.yaml:{swish_line}: npu_swissh: field 'name': no operator 'npu_swissh' is declared "
            "in op_plugin_functions.yaml\n    fix: did you mean 'npu_swish'?") in text
    assert f"derivatives.yaml:{z_line}: npu_scaled_add: field 'z': 'z' is not an argument of npu_scaled_add" in text


def test_generate_rewrites_only_changed_files(codegen, project_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("generated")
    first = codegen.generate(str(project_dir), str(out))
    assert "csrc/adapters/npu_swish.cpp" in first and "python/torch_simhpu/_generated/fake.py" in first
    assert codegen.generate(str(project_dir), str(out)) == []

    edit(project_dir / "op_plugin_functions.yaml", "doc: Swish activation", "doc: The swish activation")
    changed = set(codegen.generate(str(project_dir), str(out)))
    assert "csrc/adapters/npu_swish.cpp" not in changed  # docs do not touch the C++ of the op
    assert "csrc/adapters/npu_add_custom.cpp" not in changed
    assert "docs/ops.md" in changed


def test_failed_check_leaves_generated_tree_untouched(codegen, project_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("generated")
    codegen.generate(str(project_dir), str(out))
    before = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    edit(project_dir / "op_plugin_functions.yaml", "exec: swish, self, beta, out", "exec: swish, self, gamma, out")
    with pytest.raises(Exception):
        codegen.generate(str(project_dir), str(out))
    assert {p: p.read_text() for p in out.rglob("*") if p.is_file()} == before


def test_removed_operator_loses_its_translation_unit(codegen, project_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("generated")
    codegen.generate(str(project_dir), str(out))
    remove_block(project_dir / "op_plugin_functions.yaml", "  - func: npu_sum_dims")
    remove_block(project_dir / "derivatives.yaml", "- name: npu_sum_dims")
    changed = codegen.generate(str(project_dir), str(out))
    assert "csrc/adapters/npu_sum_dims.cpp (removed)" in changed
    assert not (out / "csrc" / "ops" / "npu_sum_dims.cpp").exists()


def test_generated_cpp_reads_as_written(codegen, tmp_path):
    """A golden excerpt: the adapter of npu_add_custom."""
    codegen.generate(ROOT, str(tmp_path))
    text = (tmp_path / "csrc" / "adapters" / "npu_add_custom.cpp").read_text()
    expected = '''void check_npu_add_custom(const at::Tensor & x, const at::Tensor & y) {
  rules::check_device(kOpName, "x", x);
  rules::check_device(kOpName, "y", y, x);
  rules::check_dtype(kOpName, "x", x, {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16});
  rules::check_same_dtype(kOpName, "y", y, "x", x);
}

// Launches on checked arguments, writing the outputs.
void run_npu_add_custom(const at::Tensor & x, const at::Tensor & y, const at::Tensor& out) {
  EXEC_CMD_FOR(kOpName, add_custom, x, y, written(out));
}

} // namespace

// The functional form: new outputs.
at::Tensor npu_add_custom(const at::Tensor & x, const at::Tensor & y) {
  check_npu_add_custom(x, y);
  const c10::DeviceGuard _guard(x.device());
  at::Tensor out = rules::new_output(rules::broadcast_shapes(kOpName, {"x", "y"}, {x, y}),
      x.scalar_type());
  run_npu_add_custom(x, y, out);
  return out;
}'''
    assert expected in text


def test_generated_cpp_is_what_a_reviewer_would_write(codegen, emit):
    """Lines of at most 100 columns; no argument compared with itself, no
    parameter silenced with a (void) cast, no lock taken for an empty body."""
    files = emit.render(codegen.load_project(ROOT))
    cpp = {rel: text for rel, text in files.items() if rel.endswith((".cpp", ".h"))}
    long_lines = [(rel, n) for rel, text in cpp.items() for n, line in enumerate(text.splitlines(), 1)
                  if len(line) > 100]
    assert not long_lines
    for rel, text in cpp.items():
        assert "(void)" not in text, rel
        assert not re.search(r'\(kOpName, "(\w+)", \1, \1\)', text), rel
        assert not re.search(r"release_variables\(\) override \{\s*std::lock_guard[^;]*;\s*\}", text), rel


def test_new_op_scaffold_validates_and_refuses_duplicates(codegen, scaffold, project_dir):
    written = scaffold.new_op(str(project_dir), "npu_my_thing")
    assert written == [os.path.join("csrc", "kernels", "my_thing.cpp"), "op_plugin_functions.yaml", "derivatives.yaml"]
    project = codegen.load_project(str(project_dir))
    op = next(op for op in project.ops if op.name == "npu_my_thing")
    assert op.kernel == "my_thing" and op.derivative is not None
    with pytest.raises(ValueError, match="npu_my_thing is already declared"):
        scaffold.new_op(str(project_dir), "my_thing")
    with pytest.raises(ValueError, match="not a valid operator name"):
        scaffold.new_op(str(project_dir), "My-Op")


def test_docs_describe_every_op(codegen, tmp_path):
    codegen.generate(ROOT, str(tmp_path))
    docs = (tmp_path / "docs" / "ops.md").read_text()
    assert "| [`npu_softplus_beta`](#npu_softplus_beta) | generated kernel |" in docs
    assert "**Deprecated**: use [`npu_add_custom`](#npu_add_custom) instead." in docs
    assert "torch_simhpu.npu_lerp_scalar_(self, end, weight)" in docs


def test_generated_files_are_as_readable_as_any_file_written_here(emit, tmp_path):
    # A temporary file is created 0600; what codegen leaves must follow the umask instead.
    emit.write_tree(str(tmp_path), {"include/generated/a.h": "// a\n", "docs/ops.md": "# ops\n"})
    mask = os.umask(0)
    os.umask(mask)
    for rel in ("include/generated/a.h", "docs/ops.md"):
        assert (tmp_path / rel).stat().st_mode & 0o777 == 0o666 & ~mask, rel
