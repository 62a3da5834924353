"""What a wheel built from op-plugin's own YAML runs (codegen/op_plugin/translate.py,
csrc/op_plugin_dialect/): the dialect corpus's generated units, compiled into an extension that
links libtorch_simhpu as an operator package does, give official entries simulated ACLNN kernels
(ATen's result, the rules checked at every call) and custom entries callable names with a clear
error, and an overlay in simhpu's own format gives one of them an implementation. Run in a child process: the registrations last for the process."""
import os
import shutil

from helpers import python_output

CORPUS = os.path.join(os.path.dirname(__file__), "..", "codegen", "op_plugin_dialect")


def test_official_entries_run_checked_and_custom_entries_name_their_kernel(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(CORPUS, project)
    ops = project / "op_plugin_functions.yaml"
    # gelu's rule now says float64: a wrong rule, which the call must report at its line.
    ops.write_text(ops.read_text().replace("        size: self\n        dtype: self\n      new_params",
                                           "        size: self\n        dtype: at::kDouble\n      new_params"))
    # The overlay gives npu_plugged simhpu's implementation (a kernel codegen writes), in simhpu's own
    # format; its derivative comes from the dialect's derivatives.yaml, as op-plugin's would.
    (project / "op_plugin_overlay.yaml").write_text(
        "backend: simhpu\nnamespace: npu\ncustom:\n"
        "  - func: npu_plugged(Tensor self) -> Tensor\n    elementwise: self * 2\n    dtypes: [float32, float64]\n")
    derivatives = project / "derivatives.yaml"
    derivatives.write_text(derivatives.read_text() + "\n- name: npu_plugged(Tensor self) -> Tensor\n"
                           "  self: grad * 2\n  version: all_version\n")
    gelu_line = next(i for i, line in enumerate(ops.read_text().splitlines(), 1) if "- func: gelu(" in line)
    code = f"""
        import glob, os, torch, torch.utils.cpp_extension, torch_simhpu
        from torch_simhpu.codegen.emit import render, write_tree
        from torch_simhpu.codegen.project import load_project
        from torch_simhpu.utils import cpp_extension
        out = {str(tmp_path / "generated")!r}
        files = render(load_project({str(project)!r}))
        write_tree(out, files)
        exec(files["python/torch_simhpu/_generated/op_plugin.py"], generated := {{}})
        # One folder of sources, each named after its path (cpp_extension names objects by file name).
        os.makedirs(os.path.join(out, "flat"), exist_ok=True)
        sources = []
        for rel in sorted(r for r in files if r.startswith("csrc/") and r.endswith(".cpp") and "python_bindings" not in r):
            sources.append(os.path.join(out, "flat", rel.replace("/", "_")))
            with open(sources[-1], "w") as f:
                f.write(files[rel])
        torch.utils.cpp_extension.load(
            "dialect_corpus", sources,
            extra_include_paths=[*cpp_extension.include_paths(), os.path.join(out, "include")], is_python_module=False,
            extra_ldflags=[f"-L{{cpp_extension.library_paths()[0]}}", "-ltorch_simhpu"],
            build_directory={str(tmp_path)!r})
        kernels = torch_simhpu.op_plugin_kernels()
        print("kernels:", sorted(kernels.items()))
        x = torch.randn(3, 5, device="simhpu")
        print("abs equal:", torch.equal(torch.abs(x).cpu(), torch.abs(x.cpu())))
        try:
            torch.nn.functional.gelu(x)
        except RuntimeError as e:
            print("gelu:", e)
        try:
            torch.ops.npu.npu_scaled_mask(x, x, 0.5)
        except NotImplementedError as e:
            print("custom:", e)
        print("usable:", torch.equal((x * 2).cpu(), x.cpu() * 2))
        print("overlay:", torch.equal(torch.ops.npu.npu_plugged(x).cpu(), x.cpu() * 2))
        leaf = torch.randn(4, dtype=torch.float64, device="simhpu", requires_grad=True)
        print("gradcheck:", torch.autograd.gradcheck(torch.ops.npu.npu_plugged, (leaf,)))
        library = torch.library.Library("npu", "FRAGMENT")
        generated["register"](library)
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            fx = torch.empty(4, 2, device="simhpu", dtype=torch.float16)
            y = torch.ops.npu.npu_scaled_mask(fx, fx, 0.5)
            print("fake:", tuple(y.shape), y.dtype)
    """
    out = python_output(code, timeout=900)
    assert "('abs', 'simulated')" in out and "('gelu', 'simulated')" in out, out
    assert "('npu::npu_scaled_mask', 'unprovided')" in out and "abs equal: True" in out
    assert (f"gelu: aten::gelu (op_plugin_functions.yaml:{gelu_line}): gen_opapi's rule for output 0 of aclnnGelu "
            "gives size [3, 5] and dtype Double, where ATen computes size [3, 5] and dtype Float") in out, out
    assert "custom: npu::npu_scaled_mask (op_plugin_functions.yaml:" in out
    assert "its ACLNN kernel aclnnScaledMask is torch_npu's" in out and "usable: True" in out
    assert "fake: (4, 2) torch.float16" in out and "overlay: True" in out and "gradcheck: True" in out
