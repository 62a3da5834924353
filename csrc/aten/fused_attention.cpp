// Fused attention. scaled_dot_product_attention asks a device's
// _fused_sdp_choice_stub which kernel to take; a device without one gets the
// math decomposition: bmm, softmax, masks and their backward, about a dozen
// launches each way. The device's processor is the CPU, whose fused (flash)
// attention kernels are the device's reference kernels for it: where the CPU
// would take its flash kernel, the device takes PyTorch's "overrideable"
// backend, whose two operators run the CPU's flash kernels as device kernels
// (the reference path: meta kernel on the host, CPU kernel on the worker).
#include <ATen/OpMathType.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils.h>  // defines its functions: one translation unit only
#include <ATen/ops/_fused_sdp_choice_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <array>

namespace simhpu::attention {
namespace {

using at::Tensor;

// The CPU's choice, narrowed to what the overrideable operators can carry: they
// take no dropout (the CPU kernel would draw from the CPU's generator), no
// grouped-query attention (scaled_dot_product_attention does not pass it on)
// and give no gradient for a mask.
int64_t fused_sdp_choice(const Tensor& query, const Tensor& key, const Tensor& value,
                         const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  const auto cpu_choice = static_cast<at::SDPBackend>(
      at::native::_fused_sdp_choice_cpp(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa));
  const bool fused = cpu_choice == at::SDPBackend::flash_attention && dropout_p == 0.0 && !enable_gqa &&
      !(attn_mask.has_value() && attn_mask->defined() && attn_mask->requires_grad());
  return static_cast<int64_t>(fused ? at::SDPBackend::overrideable : at::SDPBackend::math);
}

// `t` in the layout the operators' meta kernels promise (compiled graphs check
// their outputs' strides against them): `like`'s, as PyTorch's own SDPA
// kernels allocate their outputs.
Tensor laid_out_like(const Tensor& t, const Tensor& like) {
  Tensor laid_out;
  at::native::alloc_with_matching_layout(like, laid_out, t.sizes().vec());
  return laid_out.strides() == t.strides() ? t : laid_out.copy_(t);
}

std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor> forward(
    const Tensor& query, const Tensor& key, const Tensor& value, const std::optional<Tensor>& attn_bias,
    double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "_scaled_dot_product_fused_attention_overrideable on simhpu: dropout_p must be 0 ",
              "(got ", dropout_p, "); scaled_dot_product_attention takes the math path for dropout");
  TORCH_CHECK(!return_debug_mask, "_scaled_dot_product_fused_attention_overrideable on simhpu: no debug mask");
  auto [output, logsumexp] =
      at::_scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, attn_bias, scale);
  // The CPU kernel's logsumexp is [batch, query, heads] in its compute dtype;
  // the operator's is [batch, heads, query] in float32.
  logsumexp = logsumexp.to(at::kFloat).contiguous();
  const auto none = at::empty({}, query.options().dtype(at::kLong));
  return {laid_out_like(output, query), logsumexp, Tensor(), Tensor(), query.sym_size(-2), key.sym_size(-2),
          none, none, Tensor()};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
    const Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const Tensor& out,
    const Tensor& logsumexp, const Tensor& /*cum_seq_q*/, const Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/,
    c10::SymInt /*max_k*/, double dropout_p, bool is_causal, const Tensor& /*philox_seed*/,
    const Tensor& /*philox_offset*/, std::optional<double> scale) {
  TORCH_CHECK(!grad_input_mask[3], "_scaled_dot_product_fused_attention_overrideable_backward on simhpu: ",
              "no gradient for attn_bias (a mask that requires grad takes the math path)");
  if (!grad_out.defined()) {
    return {};  // no gradient flows in: none flows out (autograd reads undefined as zeros)
  }
  const auto compute_dtype = at::toOpMathType(query.scalar_type());
  auto [grad_q, grad_k, grad_v] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, query, key, value, out, logsumexp.to(compute_dtype).transpose(1, 2).contiguous().transpose(1, 2),
      dropout_p, is_causal, attn_bias.defined() ? std::optional<Tensor>(attn_bias) : std::nullopt, scale);
  Tensor grad_bias = attn_bias.defined() ? at::empty_like(attn_bias) : Tensor();
  return {laid_out_like(grad_q, query), laid_out_like(grad_k, key), laid_out_like(grad_v, value), grad_bias};
}

} // namespace
} // namespace simhpu::attention

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &simhpu::attention::fused_sdp_choice)
} // namespace at::native

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(simhpu::attention::forward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(simhpu::attention::backward));
}
