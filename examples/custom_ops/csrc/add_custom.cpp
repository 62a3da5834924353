// custom_ops::add_custom: a device kernel of this package, its adapter
// (EXEC_CMD), its backward (a C++ autograd Function), its Meta kernel for
// torch.compile, and a Python binding: standard TORCH_LIBRARY /
// TORCH_LIBRARY_IMPL / PYBIND11_MODULE against the simhpu SDK.
#include <torch_simhpu/extension.h>

#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

namespace custom_ops {

using simhpu::DeviceTensor;
using simhpu::Out;

// The device kernel: runs on the stream's worker, over device memory.
void custom_ops_add(const DeviceTensor& x, const DeviceTensor& y, const Out<DeviceTensor>& out) {
  SIMHPU_DISPATCH_FLOATING(out.dtype, "custom_ops_add", [&] {
    simhpu::kernels::elementwise<scalar_t>(out, [](scalar_t a, scalar_t b) { return a + b; }, x, y);
  });
}
SIMHPU_KERNEL(custom_ops_add);

// The adapter: checks, allocates the output, queues the kernel and returns.
at::Tensor add_custom(const at::Tensor& self, const at::Tensor& other) {
  constexpr const char* op = "custom_ops::add_custom";
  simhpu::rules::check_device(op, "self", self);
  simhpu::rules::check_device(op, "other", other, self);
  simhpu::rules::check_same_dtype(op, "other", other, "self", self);
  simhpu::rules::check_dtype(op, "self", self, {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16});
  const c10::DeviceGuard guard(self.device());
  at::Tensor result = at::empty(at::infer_size(self.sizes(), other.sizes()), self.options());
  EXEC_CMD_FOR(op, custom_ops_add, self, other, simhpu::written(result));
  return result;
}

// Shapes only: what torch.compile's fake tensors run.
at::Tensor add_custom_meta(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "custom_ops::add_custom: other has dtype ",
              other.scalar_type(), ", expected self's dtype ", self.scalar_type());
  return at::empty(at::infer_size(self.sizes(), other.sizes()), self.options());
}

// The operator as the dispatcher has it (below autograd, or from Python).
const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&)>& add_custom_op() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("custom_ops::add_custom", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op;
}

// d(self + other) = grad, reduced to each input's shape where it was broadcast.
class AddCustomFunction : public torch::autograd::Function<AddCustomFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& self, const at::Tensor& other) {
    ctx->saved_data["self_sizes"] = self.sizes().vec();
    ctx->saved_data["other_sizes"] = other.sizes().vec();
    at::AutoDispatchBelowADInplaceOrView below;
    return add_custom_op().call(self, other);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor& grad = grads[0];
    return {at::sum_to(grad, ctx->saved_data["self_sizes"].toIntVector()),
            at::sum_to(grad, ctx->saved_data["other_sizes"].toIntVector())};
  }
};

// A call that records no graph goes straight to the device kernel: building
// the Function's context would cost more than the launch itself.
at::Tensor add_custom_autograd(const at::Tensor& self, const at::Tensor& other) {
  if (!torch::autograd::compute_requires_grad(self, other)) {
    at::AutoDispatchBelowADInplaceOrView below;
    return add_custom_op().call(self, other);
  }
  return AddCustomFunction::apply(self, other);
}

} // namespace custom_ops

TORCH_LIBRARY(custom_ops, m) {
  m.def("add_custom(Tensor self, Tensor other) -> Tensor");
}

TORCH_LIBRARY_IMPL(custom_ops, PrivateUse1, m) {
  m.impl("add_custom", &custom_ops::add_custom);
}

TORCH_LIBRARY_IMPL(custom_ops, AutogradPrivateUse1, m) {
  m.impl("add_custom", &custom_ops::add_custom_autograd);
}

TORCH_LIBRARY_IMPL(custom_ops, Meta, m) {
  m.impl("add_custom", &custom_ops::add_custom_meta);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add_custom", [](const at::Tensor& self, const at::Tensor& other) {
    return custom_ops::add_custom_op().call(self, other);
  }, pybind11::arg("self"), pybind11::arg("other"), "self + other on the simhpu device (custom_ops::add_custom).");
}
