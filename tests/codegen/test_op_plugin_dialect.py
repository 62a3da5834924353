"""op-plugin's own YAML dialect (codegen/op_plugin/dialect.py): a corpus written here in the dialect
(tests/codegen/op_plugin_dialect/) passes `check`, the installed torch selects its entries, and
each kind of mistake is one problem at its file:line with a fix."""
import os
import shutil
import subprocess
import sys

import pytest
from yaml_edit import ROOT

CORPUS = os.path.join(os.path.dirname(__file__), "op_plugin_dialect")


@pytest.fixture
def load(dialect, yaml_loader, codegen_errors):
    """(report, problems) of dialect text for a torch version."""
    def load(text: str, version: str = "v2.13"):
        problems = codegen_errors.Problems()
        report = dialect.load_dialect(yaml_loader.load_yaml(text), "ops.yaml", problems, version)
        return report, problems.items
    return load


def corpus_text() -> str:
    with open(os.path.join(CORPUS, "op_plugin_functions.yaml")) as f:
        return f.read()


def test_the_corpus_passes_check_from_the_command_line():
    result = subprocess.run([sys.executable, "-m", "codegen", "--root", CORPUS, "check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "op-plugin dialect" in result.stdout and "gen_opapi: 5 entries, 4 distinct ACLNN kernels" in result.stdout
    assert "not problems" in result.stdout  # what simhpu cannot serve is a note


def test_the_installed_torch_selects_the_entries(load):
    report, problems = load(corpus_text(), "v2.13")
    assert problems == []
    names = [e.name for e in report.entries]
    assert "npu_old_only" not in names  # acl_op: v2.1 only
    assert names.count("std.correction") == 1  # two entries, disjoint versions: one for each torch
    std = next(e for e in report.entries if e.name == "std.correction")
    assert "Scalar? correction=None" in str(std.schema)  # the v2.2+ one
    assert report.marks == 2 and report.skipped == 3
    older, problems = load(corpus_text(), "v2.1")
    assert problems == []
    assert "npu_old_only" in [e.name for e in older.entries]
    assert "int? correction" in str(next(e for e in older.entries if e.name == "std.correction").schema)
    sum_entry = next(e for e in older.entries if e.name == "sum.dim_IntList")
    assert any("dense tensors only" in n for n in sum_entry.notes)  # sparse: [v2.1, v2.2]


def test_gen_opapi_blocks_are_read_and_inherited(load):
    report, _ = load(corpus_text())
    by_name = {e.name: e for e in report.entries}
    out = by_name["abs.out"].gen_opapi
    assert out.kernel == "aclnnAbs" and out.args == ("self", "out")
    assert [(r.name, r.size, r.dtype, r.named_like) for r in out.outputs] == [("out", "self", "self", "self")]
    inherited = by_name["abs"].gen_opapi
    assert inherited.kernel == "aclnnAbs" and inherited.inherits == "abs.out"
    gelu = by_name["gelu"].gen_opapi
    assert gelu.new_params == (("approximate_mode", 'approximate == "tanh" ? 1 : 0'),)
    assert by_name["npu_scaled_mask"].gen_opapi.outputs[0].name == "scaled"  # a functional op names its outputs


@pytest.mark.parametrize("edit, field, expected", [
    (("  - func: abs(Tensor self) -> Tensor\n    acl_op: all_version",
      "  - func: abs(Tensor self) -> Tensor\n    acl_op: all_version\n    aclop: v2.2"),
     "aclop", "unknown field"),
    (("    acl_op: v2.1\n  - func: std", "    acl_op: v9.9\n  - func: std"), "acl_op", "'v9.9' is not in all_version"),
    (("    op_api: [v2.1, newest]\n    gen_opapi:\n      structured_inherit",
      "    op_api: [v2.13, v2.2]\n    gen_opapi:\n      structured_inherit"), "op_api", "runs backwards"),
    (("    acl_op: v2.1\n  - func: std", "    acl_op: v2.13\n  - func: std"), "func", "declared again for v2.13"),
    (("structured_inherit: abs.out", "structured_inherit: abs.outt"), "gen_opapi", "has no gen_opapi of its own"),
    (("exec: aclnnGelu, self, approximate_mode, out", "exec: aclnnGelu, self, approx_mode, out"),
     "gen_opapi", "'approx_mode' is not an argument"),
    (("      out:\n        size: self\n        dtype: self\n        name: self",
      "      result:\n        size: self"), "gen_opapi", "'result' is not an out argument of abs.out"),
    (("      scaled:\n        size: x\n        dtype: x\n      exec",
      "      scaled:\n        size: x\n      extra:\n        size: x\n      exec"), "gen_opapi", "rules for 2 output(s)"),
    (("      exec: aclnnInplaceLerp\n", "\n"), "gen_opapi", "no 'exec:' names the ACLNN kernel"),
    (("npu_plugged(Tensor self) -> Tensor", "npu_plugged(Tensor self -> Tensor"), "func", "not a valid schema"),
    (("device_check: NoCheck", "device_check: Check"), "device_check", "expected 'NoCheck'"),
    (("        - param: weight", "        - param: wieght"), "gen_opapi", "'wieght' is not an argument"),
])
def test_each_mistake_is_one_problem_at_its_line(load, edit, field, expected):
    old, new = edit
    text = corpus_text()
    assert old in text, old
    broken = text.replace(old, new, 1)
    _, problems = load(broken)
    assert len(problems) == 1, [str(p) for p in problems]
    problem = problems[0]
    assert problem.field == field and expected in problem.message and problem.fix
    line = broken.splitlines()[problem.line - 1]
    assert field in line or "func:" in line or field == "gen_opapi", (problem.line, line)


def test_a_torch_the_file_does_not_list_is_said(load):
    _, problems = load(corpus_text(), "v2.20")
    assert len(problems) == 1 and "v2.20" in problems[0].message and problems[0].line == 3


def test_derivatives_in_the_dialect_are_selected_by_version(codegen, tmp_path):
    shutil.copytree(CORPUS, tmp_path / "project")
    report = codegen.load_dialect_project(str(tmp_path / "project"))
    assert (report.derivatives, report.derivatives_skipped) == (1, 1)
    path = tmp_path / "project" / "derivatives.yaml"
    path.write_text(path.read_text().replace("version: v2.1", "version: v3.0"))
    with pytest.raises(Exception) as caught:
        codegen.load_dialect_project(str(tmp_path / "project"))
    assert "derivatives.yaml:10" in str(caught.value) and "'v3.0' is not in all_version" in str(caught.value)
