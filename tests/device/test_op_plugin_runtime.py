"""op-plugin's custom operators registered at run time (torch_simhpu.load_op_plugin): callable names
with their schemas, a clear error where their kernel is torch_npu's, fake kernels from their
gen_opapi rules. Run in a child process: the registrations are for the process's life."""
import os

import pytest
from helpers import python_output as run

CORPUS = os.path.join(os.path.dirname(__file__), "..", "codegen", "op_plugin_dialect", "op_plugin_functions.yaml")



def test_custom_operators_become_callable_names_with_clear_errors_and_fake_kernels():
    out = run(f"""
        import torch, torch_simhpu
        from torch._subclasses.fake_tensor import FakeTensorMode
        loaded = torch_simhpu.load_op_plugin({CORPUS!r})
        print(sorted(loaded.defined), loaded.with_fake, loaded.official)
        x = torch.randn(3, 4, device="simhpu")
        try:
            torch.ops.npu.npu_scaled_mask(x, x, 0.5)
        except NotImplementedError as e:
            print("error:", e)
        print("usable:", (x + 1).sum().item() == (x.cpu() + 1).sum().item())
        with FakeTensorMode():
            fx = torch.empty(5, 2, device="simhpu", dtype=torch.float16)
            y = torch.ops.npu.npu_scaled_mask(fx, fx, 0.5)
            print("fake:", tuple(y.shape), y.dtype, y.device.type)
        schema = torch.ops.npu.npu_rand_scale.default._schema
        print("tagged:", torch.Tag.nondeterministic_seeded in torch.ops.npu.npu_rand_scale.default.tags)
    """)
    assert "'npu_scaled_mask'" in out and "'npu_view_as_sized'" in out and "['npu_scaled_mask']" in out
    assert "op_plugin_functions.yaml:63): its ACLNN kernel aclnnScaledMask is torch_npu's" in out
    assert "register_user_custom_op" in out and "usable: True" in out
    assert "fake: (5, 2) torch.float16 simhpu" in out and "tagged: True" in out


def test_a_file_not_in_the_dialect_or_with_problems_is_refused(tmp_path):
    plain = tmp_path / "ops.yaml"
    plain.write_text("backend: simhpu\nnamespace: npu\n")
    broken = tmp_path / "broken.yaml"
    with open(CORPUS) as f:
        broken.write_text(f.read().replace("    acl_op: v2.1\n  - func: std", "    acl_op: v9.9\n  - func: std"))
    out = run(f"""
        import torch_simhpu
        for path in ({str(plain)!r}, {str(broken)!r}):
            try:
                torch_simhpu.load_op_plugin(path)
            except Exception as e:
                print(type(e).__name__, " | ".join(str(e).splitlines()[:2]))
    """)
    assert "ValueError" in out and "not in op-plugin's dialect" in out
    assert "CodegenError" in out and "broken.yaml:" in out and "'v9.9' is not in all_version" in out


def test_official_entries_run_as_simulated_aclnn_kernels_their_rules_checked_on_each_call(tmp_path):
    """simulate_aclnn: an official entry's outputs are allocated by its rules and filled with ATen's
    result; a rule that disagrees fails the call at the entry's file:line."""
    wrong = tmp_path / "wrong.yaml"
    with open(CORPUS) as f:
        wrong.write_text(f.read().replace("      out:\n        size: self\n        dtype: self\n      new_params",
                                          "      out:\n        size: self\n        dtype: at::kHalf\n      new_params"))
    out = run(f"""
        import warnings
        warnings.filterwarnings("ignore")
        import torch, torch_simhpu
        loaded = torch_simhpu.load_op_plugin({CORPUS!r}, namespace="npu_a", simulate_aclnn=True)
        print("simulated:", loaded.simulated)
        x = torch.randn(3, 4, device="simhpu")
        torch.testing.assert_close(torch.abs(x).cpu(), torch.abs(x.cpu()))
        torch.testing.assert_close(torch.nn.functional.gelu(x).cpu(), torch.nn.functional.gelu(x.cpu()))
        print("equal to the CPU")
        torch_simhpu.load_op_plugin({str(wrong)!r}, namespace="npu_b", simulate_aclnn=True)
        try:
            torch.nn.functional.gelu(x)
        except RuntimeError as e:
            print("error:", e)
        print("usable:", torch.abs(x).shape)
    """)
    assert "simulated: ['abs', 'gelu']" in out and "equal to the CPU" in out
    line = next(i for i, l in enumerate(wrong.read_text().splitlines(), 1) if l.startswith("  - func: gelu("))
    assert f"aten::gelu ({wrong}:{line}): gen_opapi's rule for output 0 gives size [3, 4] and dtype float16" in out
    assert "where ATen computes [3, 4] and float32" in out and "usable: torch.Size([3, 4])" in out


def test_a_fake_from_rules_over_a_tensor_list_gives_outputs_on_its_tensors_device():
    """The rules see a list of tensors as a tuple of their sizes and dtypes (as check.py binds op_db's
    calls), and the outputs go to the device of the first tensor, wherever in the call it is."""
    import torch

    from torch_simhpu.codegen.model.op_plugin_rules import parse
    from torch_simhpu.op_plugin_rule_checks import fake_from_rules

    fake = fake_from_rules(["tensors", "dim"], [(parse("stack_output_size(tensors, dim)"),
                                                 parse("tensors[0].scalar_type()"))])
    a = torch.ones(2, 3, device="simhpu", dtype=torch.float16)
    out = fake([a, a, a], 1)
    assert (out.shape, out.dtype, out.device.type) == ((2, 3, 3), torch.float16, "simhpu")
