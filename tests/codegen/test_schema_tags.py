"""`tags:` of a custom entry (torch.Tag names): declared with the operator's schemas, and required
where PyTorch's autograd code generator takes an operator to be random (issue 43: a realistic name,
npu_random_scale, raised an AssertionError from inside torchgen)."""
import pytest
from yaml_edit import edit, line_of

RANDOM_OP = """
  - func: npu_random_scale(Tensor x, float p) -> Tensor
    composite: "x * p"
"""


def add_random_op(project_dir, fields=""):
    edit(project_dir / "op_plugin_functions.yaml", "\ncustom:\n", "\ncustom:" + RANDOM_OP + fields)


def test_a_random_looking_operator_without_its_tag_is_a_problem_with_the_fix(codegen, project_dir):
    add_random_op(project_dir)
    with pytest.raises(codegen.CodegenError) as caught:
        codegen.load_project(str(project_dir))
    line = line_of(project_dir / "op_plugin_functions.yaml", "npu_random_scale")
    assert f"op_plugin_functions.yaml:{line}: npu_random_scale: field 'tags'" in str(caught.value)
    assert "add 'tags: [nondeterministic_seeded]'" in str(caught.value)


def test_a_tagged_operator_is_declared_with_its_tags(codegen, emit, project_dir):
    add_random_op(project_dir, "    tags: [nondeterministic_seeded]\n")
    project = codegen.load_project(str(project_dir))
    op = next(op for op in project.ops if op.name == "npu_random_scale")
    assert op.tags == ("nondeterministic_seeded",)
    unit = emit.render(project)["csrc/adapters/npu_random_scale.cpp"]
    assert '"npu_random_scale(Tensor x, float p) -> Tensor", {at::Tag::nondeterministic_seeded});' in unit


@pytest.mark.parametrize("tags, message", [
    ("[nondeterministic_seded]", "'nondeterministic_seded' is not a tag of this torch"),
    ("[pointwise, pointwise]", "a tag is listed twice"),
    ("{a: 1}", "expected a list of tag names"),
])
def test_a_wrong_tag_is_a_problem_at_its_line(codegen, project_dir, tags, message):
    add_random_op(project_dir, f"    tags: {tags}\n")
    with pytest.raises(codegen.CodegenError) as caught:
        codegen.load_project(str(project_dir))
    assert message in str(caught.value) and "field 'tags'" in str(caught.value)


def test_an_official_entry_keeps_atens_tags(codegen, project_dir):
    edit(project_dir / "op_plugin_functions.yaml", "    exec: mul, self, other, out\n",
         "    exec: mul, self, other, out\n    tags: [pointwise]\n")
    with pytest.raises(codegen.CodegenError) as caught:
        codegen.load_project(str(project_dir))
    assert "an official operator carries aten's own tags" in str(caught.value)
