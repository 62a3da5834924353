// The five operators nn.SyncBatchNorm calls, which ATen implements for CUDA
// only (no CPU kernel to run as the reference). Each is written here in terms
// of operators that have reference kernels, so it runs asynchronously on the
// device. Statistics are accumulated in float for half-precision inputs, as
// the CUDA kernels do. Channels are dimension 1; every other dimension is reduced.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace simhpu {
namespace {

using at::Tensor;

std::vector<int64_t> reduced_dims(const Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) {
    dims.push_back(d);
  }
  return dims;
}

// A per-channel vector shaped to broadcast against `input`: [C] -> [1, C, 1, ...].
Tensor per_channel(const Tensor& v, const Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = -1;
  return v.reshape(shape);
}

c10::ScalarType accumulation_type(const Tensor& input) {
  return at::toOpMathType(input.scalar_type());
}

std::tuple<Tensor, Tensor> stats(const Tensor& input, double eps) {
  TORCH_CHECK(input.dim() >= 2, "batch_norm_stats: expected an input with a channel dimension, got ", input.dim(),
              " dimension(s)");
  auto [var, mean] = at::var_mean(input.to(accumulation_type(input)), reduced_dims(input), /*correction=*/0);
  return {mean, (var + eps).rsqrt()};
}

// Combines each rank's statistics (rows of `mean` and `invstd`, `counts`
// elements each) into the whole batch's, and updates the running statistics.
std::tuple<Tensor, Tensor> gather_stats_with_counts(const Tensor& /*input*/, const Tensor& mean,
                                                               const Tensor& invstd,
                                                               const std::optional<Tensor>& running_mean,
                                                               const std::optional<Tensor>& running_var,
                                                               double momentum, double eps, const Tensor& counts) {
  const Tensor count = counts.to(mean.scalar_type()).reshape({-1, 1});
  const Tensor total = count.sum(0);
  const Tensor global_mean = (mean * count).sum(0) / total;
  const Tensor rank_var = invstd.pow(-2) - eps;
  const Tensor global_var = (count * (rank_var + (mean - global_mean).square())).sum(0) / total;
  if (running_mean && running_mean->defined()) {
    running_mean->mul_(1 - momentum).add_((global_mean * momentum).to(running_mean->scalar_type()));
  }
  if (running_var && running_var->defined()) {
    const Tensor unbiased = global_var * total / (total - 1);
    running_var->mul_(1 - momentum).add_((unbiased * momentum).to(running_var->scalar_type()));
  }
  return {global_mean, (global_var + eps).rsqrt()};
}

Tensor elemt(const Tensor& input, const std::optional<Tensor>& weight, const std::optional<Tensor>& bias,
                        const Tensor& mean, const Tensor& invstd, double /*eps*/) {
  Tensor out = (input.to(accumulation_type(input)) - per_channel(mean, input)) * per_channel(invstd, input);
  if (weight && weight->defined()) {
    out = out * per_channel(*weight, input);
  }
  if (bias && bias->defined()) {
    out = out + per_channel(*bias, input);
  }
  return out.to(input.scalar_type());
}

Tensor& elemt_out(const Tensor& input, const std::optional<Tensor>& weight,
                             const std::optional<Tensor>& bias, const Tensor& mean, const Tensor& invstd, double eps,
                             Tensor& out) {
  return out.copy_(elemt(input, weight, bias, mean, invstd, eps));
}

// This rank's sums over its batch: of grad_out, and of grad_out * (input - mean);
// and the weight's and bias's gradients when asked for.
std::tuple<Tensor, Tensor, Tensor, Tensor> backward_reduce(const Tensor& grad_out, const Tensor& input,
                                                                      const Tensor& mean, const Tensor& invstd,
                                                                      const std::optional<Tensor>& weight,
                                                                      bool input_g, bool weight_g, bool bias_g) {
  const auto dims = reduced_dims(input);
  const Tensor dy = grad_out.to(accumulation_type(input));
  const Tensor sum_dy = dy.sum(dims);
  const Tensor sum_dy_xmu = (dy * (input.to(dy.scalar_type()) - per_channel(mean, input))).sum(dims);
  const bool has_weight = weight && weight->defined();
  Tensor grad_weight, grad_bias;
  if (weight_g && has_weight) {
    grad_weight = (sum_dy_xmu * invstd).to(weight->scalar_type());
  }
  if (bias_g) {
    grad_bias = has_weight ? sum_dy.to(weight->scalar_type()) : sum_dy;
  }
  if (!input_g) {
    return {Tensor(), Tensor(), grad_weight, grad_bias};
  }
  return {sum_dy, sum_dy_xmu, grad_weight, grad_bias};
}

// The input's gradient from the whole batch's sums (all-reduced by the caller)
// and every rank's element count.
Tensor backward_elemt(const Tensor& grad_out, const Tensor& input, const Tensor& mean,
                                 const Tensor& invstd, const std::optional<Tensor>& weight, const Tensor& sum_dy,
                                 const Tensor& sum_dy_xmu, const Tensor& count) {
  const c10::ScalarType acc = accumulation_type(input);
  const Tensor total = count.to(acc).sum();
  const Tensor mean_dy = per_channel(sum_dy / total, input);
  const Tensor mean_dy_xmu = per_channel(sum_dy_xmu / total, input);
  const Tensor istd = per_channel(invstd, input);
  const Tensor xmu = input.to(acc) - per_channel(mean, input);
  Tensor grad = (grad_out.to(acc) - mean_dy - xmu * istd.square() * mean_dy_xmu) * istd;
  if (weight && weight->defined()) {
    grad = grad * per_channel(*weight, input);
  }
  return grad.to(input.scalar_type());
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("batch_norm_stats", TORCH_FN(stats));
  m.impl("batch_norm_gather_stats_with_counts", TORCH_FN(gather_stats_with_counts));
  m.impl("batch_norm_elemt", TORCH_FN(elemt));
  m.impl("batch_norm_elemt.out", TORCH_FN(elemt_out));
  m.impl("batch_norm_backward_reduce", TORCH_FN(backward_reduce));
  m.impl("batch_norm_backward_elemt", TORCH_FN(backward_elemt));
}

} // namespace simhpu
