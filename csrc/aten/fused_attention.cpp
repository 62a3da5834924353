// Fused attention. scaled_dot_product_attention asks a device's
// _fused_sdp_choice_stub which kernel to take; a device without one gets the
// math decomposition: bmm, softmax, masks and their backward, about a dozen
// launches each way. The device's processor is the CPU, whose fused (flash)
// attention kernels are the device's reference kernels for it: where the CPU
// would take its flash kernel, the device takes PyTorch's "overrideable"
// backend, whose two operators run the CPU's flash kernels as device kernels
// (the reference path: meta kernel on the host, CPU kernel on the worker).
#include "runtime/own_work.h"

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
#include <optional>

namespace simhpu::attention {
namespace {

using at::Tensor;

// Grouped-query attention: how many query heads share each key/value head (1: none).
int64_t query_heads_per_kv_head(const Tensor& query, const Tensor& key) {
  return query.dim() >= 3 && key.dim() >= 3 && key.size(-3) > 0 ? query.size(-3) / key.size(-3) : 1;
}

// `t` ([..., kv heads, length, dim]) with each head repeated for the query heads it serves.
Tensor per_query_head(const Tensor& t, int64_t groups) {
  return groups == 1 ? t : t.repeat_interleave(groups, -3);
}

// The CPU's choice (for the heads as the kernel will see them), narrowed to what
// the overrideable operators can carry: they take no dropout (the CPU kernel
// would draw from the CPU's generator) and give no gradient for a mask.
// Grouped-query attention, which scaled_dot_product_attention does not pass
// on, they recognise by the head counts, as a GPU's flash kernels do.
int64_t fused_sdp_choice(const Tensor& query, const Tensor& key, const Tensor& value,
                         const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  const bool grouped = enable_gqa && query.dim() >= 3 && key.dim() >= 3 && key.size(-3) != query.size(-3);
  if (grouped && (key.size(-3) == 0 || query.size(-3) % key.size(-3) != 0 || value.size(-3) != key.size(-3))) {
    return static_cast<int64_t>(at::SDPBackend::math);  // (the math path says what is wrong)
  }
  // As the kernel will see them: each key/value head repeated for its query heads (shapes only).
  auto as_seen = [&](const Tensor& t) {
    if (!grouped) return t;
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes[sizes.size() - 3] = query.size(-3);
    return at::empty(sizes, t.options().device(at::kMeta));
  };
  const auto cpu_choice = static_cast<at::SDPBackend>(at::native::_fused_sdp_choice_cpp(
      query, as_seen(key), as_seen(value), attn_mask, dropout_p, is_causal, scale, /*enable_gqa=*/false));
  const bool fused = cpu_choice == at::SDPBackend::flash_attention && dropout_p == 0.0 &&
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
  const int64_t groups = query_heads_per_kv_head(query, key);
  // (What fits the CPU kernel to the operator is simhpu's own work: a part's fused kernel
  // groups heads, writes float32 statistics and lays out its output itself.)
  std::optional<OwnWorkScope> fitting(std::in_place);
  const Tensor key_heads = per_query_head(key, groups), value_heads = per_query_head(value, groups);
  fitting.reset();
  auto [output, logsumexp] = at::_scaled_dot_product_flash_attention_for_cpu(
      query, key_heads, value_heads, dropout_p, is_causal, attn_bias, scale);
  fitting.emplace();
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
  const int64_t groups = query_heads_per_kv_head(query, key);
  std::optional<OwnWorkScope> fitting(std::in_place);  // (as in the forward)
  const Tensor key_heads = per_query_head(key, groups), value_heads = per_query_head(value, groups);
  const Tensor kernel_logsumexp = logsumexp.to(compute_dtype).transpose(1, 2).contiguous().transpose(1, 2);
  fitting.reset();
  auto [grad_q, grad_k, grad_v] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, query, key_heads, value_heads, out, kernel_logsumexp, dropout_p, is_causal,
      attn_bias.defined() ? std::optional<Tensor>(attn_bias) : std::nullopt, scale);
  fitting.emplace();
  if (groups > 1) {  // each key/value head's gradient: the sum over the query heads it served
    grad_k = grad_k.unflatten(-3, {key.size(-3), groups}).sum(-3);
    grad_v = grad_v.unflatten(-3, {value.size(-3), groups}).sum(-3);
  }
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
