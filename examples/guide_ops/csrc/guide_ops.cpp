// Three custom operators, one per autograd style of PyTorch's PrivateUse1 guide:
//   scale(x, s)            forward only: AutogradPrivateUse1 is the not-implemented
//                          fallback, so backward through it raises, naming it
//   square(x)              forward and backward (square_backward) both operators
//                          with device kernels; the autograd kernel links them
//   cube(x)                forward operator; autograd in Python (torch.autograd.Function)
// Each has a Meta kernel, so torch.compile traces it.
#include <torch_simhpu/extension.h>

#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace guide_ops {

using simhpu::DeviceTensor;
using simhpu::Out;

// out = s * x^p
void guide_ops_pow_scale(const DeviceTensor& x, int64_t p, double s, const Out<DeviceTensor>& out) {
  SIMHPU_DISPATCH_FLOATING(out.dtype, "guide_ops_pow_scale", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    simhpu::kernels::elementwise<scalar_t>(out, [p, s](scalar_t v) {
      acc_t r = acc_t(s);
      for (int64_t i = 0; i < p; ++i) r *= acc_t(v);
      return static_cast<scalar_t>(r);
    }, x);
  });
}
SIMHPU_KERNEL(guide_ops_pow_scale);

// out = s * a * b (broadcast)
void guide_ops_mul_scale(const DeviceTensor& a, const DeviceTensor& b, double s, const Out<DeviceTensor>& out) {
  SIMHPU_DISPATCH_FLOATING(out.dtype, "guide_ops_mul_scale", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    simhpu::kernels::elementwise<scalar_t>(
        out, [s](scalar_t u, scalar_t v) { return static_cast<scalar_t>(acc_t(s) * acc_t(u) * acc_t(v)); }, a, b);
  });
}
SIMHPU_KERNEL(guide_ops_mul_scale);

void check_input(const char* op, const at::Tensor& x) {
  simhpu::rules::check_device(op, "x", x);
  simhpu::rules::check_dtype(op, "x", x, {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16});
}

at::Tensor pow_scale(const char* op, const at::Tensor& x, int64_t p, double s) {
  check_input(op, x);
  const c10::DeviceGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  EXEC_CMD_FOR(op, guide_ops_pow_scale, x, p, s, simhpu::written(out));
  return out;
}

at::Tensor scale(const at::Tensor& x, double s) { return pow_scale("guide_ops::scale", x, 1, s); }
at::Tensor square(const at::Tensor& x) { return pow_scale("guide_ops::square", x, 2, 1.0); }
at::Tensor cube(const at::Tensor& x) { return pow_scale("guide_ops::cube", x, 3, 1.0); }

at::Tensor square_backward(const at::Tensor& grad, const at::Tensor& x) {
  constexpr const char* op = "guide_ops::square_backward";
  check_input(op, x);
  simhpu::rules::check_device(op, "grad", grad, x);
  simhpu::rules::check_same_dtype(op, "grad", grad, "x", x);
  const c10::DeviceGuard guard(x.device());
  at::Tensor out = at::empty(at::infer_size(grad.sizes(), x.sizes()), x.options());
  EXEC_CMD_FOR(op, guide_ops_mul_scale, grad, x, 2.0, simhpu::written(out));
  return out;
}

at::Tensor like_meta(const at::Tensor& x) { return at::empty(x.sizes(), x.options()); }
at::Tensor scale_meta(const at::Tensor& x, double) { return like_meta(x); }
at::Tensor square_backward_meta(const at::Tensor& grad, const at::Tensor& x) {
  return at::empty(at::infer_size(grad.sizes(), x.sizes()), x.options());
}

// square's autograd: backward is the square_backward operator.
class SquareFunction : public torch::autograd::Function<SquareFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("guide_ops::square", "")
                               .typed<at::Tensor(const at::Tensor&)>();
    return op.call(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("guide_ops::square_backward", "")
                               .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
    return {op.call(grads[0], ctx->get_saved_variables()[0])};
  }
};

at::Tensor square_autograd(const at::Tensor& x) { return SquareFunction::apply(x); }

} // namespace guide_ops

TORCH_LIBRARY(guide_ops, m) {
  m.def("scale(Tensor x, float s) -> Tensor");
  m.def("square(Tensor x) -> Tensor");
  m.def("square_backward(Tensor grad, Tensor x) -> Tensor");
  m.def("cube(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(guide_ops, PrivateUse1, m) {
  m.impl("scale", &guide_ops::scale);
  m.impl("square", &guide_ops::square);
  m.impl("square_backward", &guide_ops::square_backward);
  m.impl("cube", &guide_ops::cube);
}

TORCH_LIBRARY_IMPL(guide_ops, AutogradPrivateUse1, m) {
  m.impl("scale", torch::autograd::autogradNotImplementedFallback());
  m.impl("square", &guide_ops::square_autograd);
}

TORCH_LIBRARY_IMPL(guide_ops, Meta, m) {
  m.impl("scale", &guide_ops::scale_meta);
  m.impl("square", &guide_ops::like_meta);
  m.impl("square_backward", &guide_ops::square_backward_meta);
  m.impl("cube", &guide_ops::like_meta);
}
