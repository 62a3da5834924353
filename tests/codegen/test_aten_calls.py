"""Calls of ATen's C++ API in composite expressions and derivative formulas (issue 43): an
operator's function is found by what ATen's headers declare, a SymInt passed makes the call
ATen's X_symint form, and what would not compile is a problem at check, not a compiler error."""
import pytest
from test_codegen_fuzz import compile_cpp
from yaml_edit import edit


def add_composite(project_dir, func: str, composite: str) -> None:
    edit(project_dir / "op_plugin_functions.yaml", "\ncustom:\n",
         f"\ncustom:\n  - func: {func}\n    composite: \"{composite}\"\n")


@pytest.mark.parametrize("func, composite, cpp", [
    ("npu_topk_values(Tensor self, SymInt k) -> Tensor", "std::get<0>(at::topk(self, k))",
     "std::get<0>(at::topk_symint(self, k))"),
    ("npu_conv(Tensor x, Tensor w, Tensor? b, SymInt[1] stride=1) -> Tensor", "at::conv1d(x, w, b, stride)",
     "at::conv1d_symint(x, w, b, stride)"),
    ("npu_lower(Tensor self, SymInt k) -> Tensor", "tril(self, k)", "tril_symint(self, k)"),
    ("npu_zeros_like_sized(Tensor self) -> Tensor", "at::zeros(self.sym_sizes(), self.options())",
     "at::zeros_symint(self.sym_sizes(), self.options())"),
    ("npu_and(Tensor self, Tensor other) -> Tensor", "at::__and__(self, other)", "at::__and__(self, other)"),
    # a method takes its X_symint form too, and what its arguments pass stays inside its call
    ("npu_grown(Tensor self, SymInt[] size) -> Tensor", "at::mul(self.expand(size), 2)",
     "at::mul(self.expand_symint(size), 2)"),
])
def test_calls_that_pass_symints_take_atens_symint_form_and_compile(codegen, emit, project_dir, tmp_path,
                                                                     func, composite, cpp):
    add_composite(project_dir, func, composite)
    project = codegen.load_project(str(project_dir))
    name = func.split("(")[0]
    files = emit.render(project)
    unit = files[f"csrc/adapters/{name}.cpp"]
    assert cpp in unit
    compile_cpp(files, [f"csrc/adapters/{name}.cpp"], tmp_path / "generated")


@pytest.mark.parametrize("composite, message", [
    ("at::and(self, other)", "'at::and', which is not an aten operator function (ATen/ops/and.h declares __and__)"),
    ("at::item(self)", "'at::item', which is not an aten operator function (ATen has it as a Tensor method only"),
    ("at::gcd(self, k)", "passes a SymInt to 'at::gcd', which takes plain integers"),
    ("self.unsqueeze(k)", "a SymInt is passed to '.unsqueeze()', which takes ints (there is no .unsqueeze_symint)"),
])
def test_calls_that_would_not_compile_are_problems_at_check(codegen, project_dir, composite, message):
    add_composite(project_dir, "npu_bad(Tensor self, Tensor other, SymInt k) -> Tensor", composite)
    with pytest.raises(codegen.CodegenError) as caught:
        codegen.load_project(str(project_dir))
    assert message in str(caught.value) and "npu_bad: field 'composite'" in str(caught.value)


def test_an_argument_named_like_the_autograd_kernels_guard_is_refused(codegen, project_dir):
    edit(project_dir / "op_plugin_functions.yaml", "npu_swish(Tensor self, float beta=1.0)",
         "npu_swish(Tensor self, float below_autograd=1.0)")
    edit(project_dir / "op_plugin_functions.yaml", "exec: swish, self, beta, out", "exec: swish, self, below_autograd, out")
    with pytest.raises(codegen.CodegenError) as caught:
        codegen.load_project(str(project_dir))
    assert "argument name 'below_autograd' collides with a name the generated code uses" in str(caught.value)


def test_a_stub_entry_listing_a_dtype_twice_is_refused(codegen, project_dir):
    edit(project_dir / "op_plugin_functions.yaml",
         "    elementwise: self < other\n    dtypes: [float32,", "    elementwise: self < other\n    dtypes: [float32, float32,")
    with pytest.raises(codegen.CodegenError) as caught:
        codegen.load_project(str(project_dir))
    assert "dtype 'float32' is listed twice" in str(caught.value)


def test_atens_optional_lists_and_symints_reach_the_binding_kernel_and_backward(codegen, emit, project_dir, tmp_path):
    # int[1]? / SymInt[1]? / SymInt? arguments: None or a value through the Python binding, and an
    # optional list the backward needs is kept as a list (the argument's view would dangle).
    func = ("npu_rows(Tensor self, Tensor other, int[1]? dim=None, SymInt[1]? size=None, SymInt? pad=None, "
            "str? mode=None, float[]? scales=None) -> Tensor")
    edit(project_dir / "op_plugin_functions.yaml", "\ncustom:\n",
         f"\ncustom:\n  - func: {func}\n    exec: add_custom, self, other, out\n"
         f"    out: {{size: self, dtype: self}}\n    dtypes: [float32]\n")
    with open(project_dir / "derivatives.yaml", "a") as f:
        # (built, not run: the formula only has to save each optional kind and pass it on)
        f.write(f"\n- name: {func}\n  self: grad.sum(dim, true).expand_as(self)\n"
                f"  other: at::div(at::_upsample_nearest_exact1d(grad, size, scales), 1, mode)\n")
    files = emit.render(codegen.load_project(str(project_dir)))
    backward = files["csrc/autograd/npu_rows.cpp"]
    for saved in ("c10::OptionalArray<int64_t> dim;", "c10::OptionalArray<c10::SymInt> size;",
                  "c10::OptionalArray<double> scales;", "std::optional<std::string> mode;"):
        assert saved in backward
    assert "def npu_rows(self: Tensor, other: Tensor, dim: int | Sequence[int] | None = None," in \
        files["python/torch_simhpu/__init__.pyi"]
    compile_cpp(files, ["csrc/adapters/npu_rows.cpp", "csrc/autograd/npu_rows.cpp"], tmp_path / "generated")
