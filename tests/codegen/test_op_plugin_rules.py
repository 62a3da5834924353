"""op-plugin's output rules (codegen/model/op_plugin_rules.py) read and evaluated, and held to ATen on
the calls of PyTorch's op_db (codegen/op_plugin/check.py)."""
import os
import shutil

import pytest
import torch


@pytest.fixture(scope="module")
def rules(rule_language):
    return rule_language


def value(rules, text, **values):
    return rules.evaluate(rules.parse(text), values)


def test_rules_evaluate_as_their_helpers_and_operators_mean(rules):
    a, b = rules.Tensor((4, 1, 3), torch.float16), rules.Tensor((5, 3), torch.int64)
    assert value(rules, "broadcast_ops_npu_output_size(self, other)", self=a, other=b) == (4, 5, 3)
    assert value(rules, "reduce_ops_npu_output_size(self, {dim}, keepdim)", self=a, dim=-1, keepdim=True) == (4, 1, 1)
    assert value(rules, "op_infer::reduce_ops_npu_output_size(self, dim, false)", self=a, dim=(0, 2)) == (1,)
    assert value(rules, "{self.size(0) + 2 * pad, self.size(-1)}", self=a, pad=1) == (6, 3)
    assert value(rules, "c10::SmallVector<int64_t, op_infer::SIZE>{self.size(1)}", self=a) == (1,)
    assert value(rules, "(reduction == at::Reduction::None) ? self.sizes() : at::ArrayRef<int64_t>()",
                 self=a, reduction=1) == ()
    assert value(rules, "isIntegralType(other.scalar_type(), true) ? at::kFloat : other.scalar_type()",
                 other=b) == torch.float32
    assert value(rules, "at::native::result_type(self, other)", self=a, other=b) == torch.float16
    assert value(rules, "self.scalar_type() == at::ScalarType::Half && out_int32 ? at::kInt : at::kLong",
                 self=a, out_int32=True) == torch.int32


@pytest.mark.parametrize("text, reason", [
    ("__import__('os').system('true')", "cannot read"),  # (a quote is not in the rule language)
    ("__import__(os)", "not an output-size helper"),
    ("self; system(x)", "cannot read"),
    ("unknown_helper(self)", "not an output-size helper"),
    ("self.storage()", r"storage\(\)' of a Tensor is not known"),
    ("a" * 3000, "longer than"),
])
def test_what_the_evaluator_does_not_know_is_unreadable_never_run(rules, text, reason):
    with pytest.raises(rules.RuleUnreadable, match=reason):
        rules.evaluate(rules.parse(text), {"self": rules.Tensor((2,), torch.float32), "x": 1, "os": 1, "a" * 3000: 1})


def test_check_rules_holds_the_corpus_to_aten_and_reports_a_wrong_rule_at_its_line(codegen, rule_checks, tmp_path):
    check = rule_checks
    corpus = os.path.join(os.path.dirname(__file__), "op_plugin_dialect")
    shutil.copytree(corpus, tmp_path / "project")
    report = codegen.load_dialect_project(str(tmp_path / "project"))
    checks = {c.entry.name: c for c in check.check_rules(report, ops={"abs.out", "abs", "gelu"})}
    assert all(c.calls and not c.mismatches for c in checks.values()), {n: c.mismatches for n, c in checks.items()}
    path = tmp_path / "project" / "op_plugin_functions.yaml"
    path.write_text(path.read_text().replace("      out:\n        size: self\n        dtype: self\n      new_params",
                                             "      out:\n        size: '{self.size(0)}'\n        dtype: at::kHalf\n"
                                             "      new_params"))
    report = codegen.load_dialect_project(str(tmp_path / "project"))
    (gelu,) = check.check_rules(report, ops={"gelu"})
    assert gelu.mismatches and {m[1] for m in gelu.mismatches} == {"size", "dtype"}
    text = check.summary([gelu], "op_plugin_functions.yaml")
    line = next(i for i, l in enumerate(path.read_text().splitlines(), 1) if l.startswith("  - func: gelu("))
    assert f"op_plugin_functions.yaml:{line}: gelu: gen_opapi out size: the rule gives" in text
