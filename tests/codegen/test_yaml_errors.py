"""The corpus of broken YAML files in tests/codegen/yaml_errors/: each must be rejected
with the exact first problem its last line states (`# expect: file:line: ...`).
Files named *.derivatives.yaml stand in for derivatives.yaml next to the
operators of yaml_errors/ops_for_derivatives.yml; the others stand in for
op_plugin_functions.yaml with an empty derivatives.yaml."""
import glob
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = sorted(glob.glob(os.path.join(ROOT, "tests", "codegen", "yaml_errors", "*.yaml")))



@pytest.fixture(scope="module")
def project_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    for part in ("kernels", "autograd"):
        shutil.copytree(os.path.join(ROOT, "csrc", part), root / "csrc" / part)
    return root


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 25


@pytest.mark.parametrize("path", CORPUS, ids=[os.path.basename(p)[:-5] for p in CORPUS])
def test_broken_yaml_is_rejected_with_its_message(codegen, project_root, path):
    text = open(path).read()
    expected = text.rstrip("\n").split("\n")[-1]
    assert expected.startswith("# expect: ")
    if path.endswith(".derivatives.yaml"):
        shutil.copy(os.path.join(ROOT, "tests", "codegen", "yaml_errors", "ops_for_derivatives.yml"),
                    project_root / "op_plugin_functions.yaml")
        (project_root / "derivatives.yaml").write_text(text)
    else:
        (project_root / "op_plugin_functions.yaml").write_text(text)
        (project_root / "derivatives.yaml").write_text("[]\n")
    with pytest.raises(codegen.CodegenError) as info:
        codegen.load_project(str(project_root))
    first = str(info.value.problems[0]).split("\n")[0]
    assert first == expected[len("# expect: "):]
