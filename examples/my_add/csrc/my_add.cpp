// npu::my_add(x, y, alpha): this package's device kernel, launched with
// EXEC_CMD from a hand-written adapter, added to torch_simhpu's `npu` namespace
// by a library fragment. Python registers the fake kernel and the backward.
#include <torch_simhpu/extension.h>

#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace my_add {

using simhpu::DeviceTensor;
using simhpu::Out;

// out = x + alpha * y, broadcast; computed in float for reduced-precision inputs.
void my_add_kernel(const DeviceTensor& x, const DeviceTensor& y, double alpha, const Out<DeviceTensor>& out) {
  SIMHPU_DISPATCH_FLOATING(out.dtype, "my_add_kernel", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t a = static_cast<acc_t>(alpha);
    simhpu::kernels::elementwise<scalar_t>(
        out, [a](scalar_t u, scalar_t v) { return static_cast<scalar_t>(acc_t(u) + a * acc_t(v)); }, x, y);
  });
}
SIMHPU_KERNEL(my_add_kernel);

at::Tensor my_add(const at::Tensor& x, const at::Tensor& y, double alpha) {
  constexpr const char* op = "npu::my_add";
  simhpu::rules::check_device(op, "x", x);
  simhpu::rules::check_device(op, "y", y, x);
  simhpu::rules::check_same_dtype(op, "y", y, "x", x);
  simhpu::rules::check_dtype(op, "x", x, {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16});
  const c10::DeviceGuard guard(x.device());
  at::Tensor out = at::empty(at::infer_size(x.sizes(), y.sizes()), x.options());
  EXEC_CMD_FOR(op, my_add_kernel, x, y, alpha, simhpu::written(out));
  return out;
}

} // namespace my_add

TORCH_LIBRARY_FRAGMENT(npu, m) {
  m.def("my_add(Tensor x, Tensor y, float alpha=1.0) -> Tensor");
}

TORCH_LIBRARY_IMPL(npu, PrivateUse1, m) {
  m.impl("my_add", &my_add::my_add);
}
