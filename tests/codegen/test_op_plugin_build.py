"""Building from op-plugin's own YAML (codegen/op_plugin/translate.py, codegen/dest/op_plugin.py):
the dialect corpus translates into the typed model, generates grouped units that compile, one
edited entry rewrites one unit, and nothing of a rule's text reaches the C++ as code."""
import os
import shutil

import pytest
from test_codegen_fuzz import check_generated, compile_cpp

CORPUS = os.path.join(os.path.dirname(__file__), "op_plugin_dialect")


@pytest.fixture
def corpus(tmp_path):
    shutil.copytree(CORPUS, tmp_path / "project")
    return tmp_path / "project"


def group_units(files: dict) -> dict:
    return {rel: text for rel, text in files.items() if rel.startswith("csrc/op_plugin_dialect/")}


def test_the_corpus_translates_into_simulated_and_unprovided_operators(codegen, corpus):
    project = codegen.load_project(str(corpus))
    kinds = {op.name: (op.kind, op.implementation, op.kernel) for op in project.ops}
    assert kinds == {
        "abs.out": ("official", "aclnn", "aclnnAbs"),
        "abs": ("official", "aclnn", "aclnnAbs"),  # its rules are abs.out's (structured_inherit)
        "gelu": ("official", "aclnn", "aclnnGelu"),
        "npu_scaled_mask": ("custom", "unprovided", "aclnnScaledMask"),
        "npu_rand_scale": ("custom", "unprovided", ""),
        "npu_plugged": ("custom", "unprovided", ""),
        "npu_view_as_sized": ("custom", "unprovided", ""),
        "int_repr": ("custom", "unprovided", ""),
    }
    # lerp_ has no output rules, sum/cat/add_/std no gen_opapi: the reference path serves them, nothing generated.
    assert {op.name: op.tags for op in project.ops}["npu_rand_scale"] == ("nondeterministic_seeded",)


def test_generated_units_define_register_and_compile(codegen, emit, corpus, tmp_path):
    files = emit.render(codegen.load_project(str(corpus)))
    units = group_units(files)
    text = "\n".join(units.values())
    assert text.count("add_simulated_kernel(") == 3 and text.count("add_unprovided_kernel(") == 5
    assert '"npu_rand_scale(Tensor self, float p, *, Generator? generator=None) -> Tensor",\n' \
           '      {at::Tag::nondeterministic_seeded}' in text
    python = files["python/torch_simhpu/_generated/op_plugin.py"]
    assert '"npu_scaled_mask",' in python and "'npu_scaled_mask': (('x', 'mask', 'scale')," in python
    assert "def npu_scaled_mask(*args: Any, **kwargs: Any) -> Any:" in files["python/torch_simhpu/__init__.pyi"]
    check_generated(files)
    compile_cpp(files, sorted(units), tmp_path / "generated")


def test_one_edited_entry_rewrites_one_unit(codegen, emit, corpus, tmp_path):
    out = tmp_path / "generated"
    emit.write_tree(str(out), emit.render(codegen.load_project(str(corpus))))
    path = corpus / "op_plugin_functions.yaml"
    path.write_text(path.read_text().replace("npu_plugged(Tensor self) -> Tensor",
                                             "npu_plugged(Tensor self, int times=1) -> Tensor"))
    changed = emit.write_tree(str(out), emit.render(codegen.load_project(str(corpus))))
    assert len(changed) == 1 and changed[0].startswith("csrc/op_plugin_dialect/group_"), changed


@pytest.mark.parametrize("rule", [
    'self"); std::system("touch /tmp/pwned',  # a string literal: not in the rule grammar
    "self; std::abort()",
    "std::system(self)",  # a call to what is not an output-size helper
    "self.data_ptr()",  # a method RuleValue does not answer
])
def test_a_hostile_rule_never_reaches_the_cpp(codegen, emit, corpus, rule):
    path = corpus / "op_plugin_functions.yaml"
    path.write_text(path.read_text().replace("        size: self\n        dtype: self\n      new_params",
                                 f"        size: '{rule}'\n        dtype: self\n      new_params"))
    project = codegen.load_project(str(corpus))
    ops = {op.name: op for op in project.ops}
    assert "gelu" not in ops  # its rule is unreadable: the reference path serves it, unchecked
    files = emit.render(project)
    code = "\n".join(group_units(files).values())
    assert "system" not in code and "abort" not in code and "data_ptr" not in code
    check_generated(files)


def test_an_unknown_tag_is_a_problem_at_its_line(codegen, corpus):
    path = corpus / "op_plugin_functions.yaml"
    path.write_text(path.read_text().replace("tags: nondeterministic_seeded", "tags: [nondeterministic_seeded, fast]"))
    with pytest.raises(Exception) as caught:
        codegen.load_project(str(corpus))
    assert "op_plugin_functions.yaml:" in str(caught.value) and "'fast' is not a tag of this torch" in str(caught.value)


def test_an_operator_package_is_not_built_from_the_dialect(codegen, corpus):
    from codegen.target import package
    with pytest.raises(Exception) as caught:
        codegen.load_project(str(corpus), package("my_ops._C"))
    assert "an operator package cannot be built from op-plugin's dialect" in str(caught.value)


def test_every_helper_the_rules_may_call_has_its_cpp_with_the_arity_codegen_assumes():
    import re
    from codegen.model.op_plugin_rules_cpp import ARITY
    from codegen.model.op_plugin_rules import HELPERS
    from yaml_edit import ROOT

    assert set(ARITY) == set(HELPERS)
    with open(os.path.join(ROOT, "csrc", "op_plugin_dialect", "rule_value.h")) as f:
        header = f.read()
    helpers = header[header.index("namespace helpers {"):]
    declared = {m.group(1): m.group(2) for m in re.finditer(r"RuleValue (\w+)\(([^)]*)\);", helpers)}
    for name, arity in ARITY.items():
        if arity is None:
            continue
        assert name in declared, name
        assert (declared[name].count(",") + 1 if declared[name].strip() else 0) == arity, name


OVERLAY = """\
backend: simhpu
namespace: npu
custom:
  - func: npu_scaled_mask(Tensor x, Tensor mask, float scale) -> Tensor
    composite: "x * mask * scale"
"""


def test_an_overlay_gives_a_dialect_operator_simhpus_implementation(codegen, emit, corpus):
    (corpus / "op_plugin_overlay.yaml").write_text(OVERLAY)
    project = codegen.load_project(str(corpus))
    kinds = {op.name: op.implementation for op in project.ops}
    assert kinds["npu_scaled_mask"] == "composite" and kinds["npu_plugged"] == "unprovided"
    assert list(kinds).count("npu_scaled_mask") == 1
    files = emit.render(project)
    assert "csrc/adapters/npu_scaled_mask.cpp" in files
    units = "\n".join(group_units(files).values())
    assert "npu_scaled_mask" not in units  # no second definition of the operator


def test_an_overlay_operator_takes_its_derivative_from_the_dialects_derivatives_yaml(codegen, corpus):
    (corpus / "op_plugin_overlay.yaml").write_text(OVERLAY.replace('composite: "x * mask * scale"',
                                                                   "elementwise: x * mask * scale\n    dtypes: [float32]"))
    ops = {op.name: op for op in codegen.load_project(str(corpus)).ops}
    derivative = ops["npu_scaled_mask"].derivative
    assert derivative is not None and "npu_scaled_mask" in derivative.derivatives[0].formula
    assert ops["npu_scaled_mask"].npu_calls == {"npu_scaled_mask"}


def test_an_overlay_entry_with_another_schema_is_a_problem_at_its_line(codegen, corpus):
    (corpus / "op_plugin_overlay.yaml").write_text(OVERLAY.replace("float scale", "float scale=1.0"))
    with pytest.raises(Exception) as caught:
        codegen.load_project(str(corpus))
    assert "op_plugin_overlay.yaml:4: npu_scaled_mask: field 'func': op_plugin_functions.yaml:" in str(caught.value)
    assert "give the overlay entry the dialect entry's schema exactly" in str(caught.value)


def test_a_custom_entry_torch_cannot_define_is_a_problem_at_its_line(codegen, corpus):
    path = corpus / "op_plugin_functions.yaml"
    # torchgen reads a Tensor[] default of []; torch's own schema parser refuses it
    path.write_text(path.read_text().replace("npu_plugged(Tensor self) -> Tensor",
                                             "npu_plugged(Tensor self, Tensor[] a=[]) -> Tensor"))
    with pytest.raises(codegen.CodegenError) as caught:
        codegen.load_project(str(corpus))
    assert "npu_plugged: field 'func': torch cannot define this schema" in str(caught.value)
