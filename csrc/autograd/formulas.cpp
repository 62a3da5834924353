#include "autograd/formulas.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/sigmoid.h>
#include <c10/core/WrapDimMinimal.h>

#include <algorithm>
#include <vector>

namespace simhpu::formulas {

at::Tensor not_implemented(const char* what) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "the derivative of ", what, " is not written yet (see derivatives.yaml)");
}

at::Tensor sum_dims_backward(const at::Tensor& grad, c10::SymIntArrayRef input_sizes,
                             c10::IntArrayRef dim, bool keepdim) {
  at::Tensor g = grad;
  const int64_t ndim = static_cast<int64_t>(input_sizes.size());
  if (!keepdim && ndim > 0) {
    std::vector<int64_t> dims;
    for (int64_t d : dim) {
      dims.push_back(c10::maybe_wrap_dim(d, ndim));
    }
    if (dims.empty()) {  // an empty dim list reduces every dimension
      for (int64_t d = 0; d < ndim; ++d) dims.push_back(d);
    }
    std::sort(dims.begin(), dims.end());
    for (int64_t d : dims) {
      g = g.unsqueeze(d);
    }
  }
  return g.expand_symint(input_sizes);
}

at::Tensor swish_backward(const at::Tensor& grad, const at::Tensor& self, double beta) {
  const at::Tensor s = at::sigmoid(self * beta);
  return grad * (s * (1 + self * beta * (1 - s)));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> mul_add_backward(
    const at::Tensor& grad_prod, const at::Tensor& grad_total, const at::Tensor& x, const at::Tensor& y,
    std::array<bool, 3> grad_input_mask) {
  at::Tensor gx, gy, gz;
  if (grad_input_mask[0]) {
    gx = grad_prod * y + grad_total;
  }
  if (grad_input_mask[1]) {
    gy = grad_prod * x;
  }
  if (grad_input_mask[2]) {
    gz = grad_total;
  }
  return {gx, gy, gz};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm_backward(
    const at::Tensor& grad_y, const at::Tensor& grad_total, const at::Tensor& total, const at::Tensor& gamma,
    const at::Tensor& rstd) {
  // Through the dispatcher, not the generated C++ API: these helpers compile whatever the ops file
  // declares (a wheel built from op-plugin's dialect has no npu_rms_norm_backward of simhpu's).
  static const auto rms_norm_backward =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("npu::npu_rms_norm_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                    const at::Tensor&)>();
  auto [grad_sum, grad_gamma] = rms_norm_backward.call(grad_y, total, gamma, rstd);
  const at::Tensor grad_inputs = grad_sum + grad_total;
  return {grad_inputs, grad_inputs, grad_gamma};
}

} // namespace simhpu::formulas
