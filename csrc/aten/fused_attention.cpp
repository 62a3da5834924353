// Fused attention. scaled_dot_product_attention asks a device's
// _fused_sdp_choice_stub which kernel to take; a device without one gets the
// math decomposition: bmm, softmax, masks and their backward, about a dozen
// launches each way. The device's processor is the CPU, whose fused (flash)
// attention kernels are the device's reference kernels for it: where the CPU
// would take its flash kernel, the device names one of PyTorch's fused
// operators, whose kernels run the CPU's flash kernels as device kernels (the
// reference path: meta kernel on the host, CPU kernel on the worker).
//
// Which operator it names follows the program's priority order
// (sdpa_kernel(..., set_priority=True)), as a part's choice does: cuDNN's,
// which is what a Hopper part names and what code written for one (context
// parallelism's ring attention, DTensor's sharding rules) expects, or the
// "overrideable" one where the program put flash first. (scaled_dot_product_
// attention names the flash operator itself only on CUDA; elsewhere it calls the
// CPU's, which no device can take over.) The efficient operator is not named:
// its kernel writes a padded logsumexp and draws its own dropout.
#include "runtime/launch_work.h"
#include "runtime/observers.h"
#include "runtime/own_work.h"

#include <ATen/Context.h>
#include <c10/util/ScopeExit.h>
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
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <utility>

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

// The fused operator the program's priority order names first among those
// the device carries (see the file's comment), or math where math comes first.
at::SDPBackend named_operator(const Tensor& query, const Tensor& key, const Tensor& value) {
  auto& context = at::globalContext();
  const bool batched = query.dim() == 4 && key.dim() == 4 && value.dim() == 4;  // cuDNN's operator takes [B, H, L, E]
  for (const at::SDPBackend backend : context.sDPPriorityOrder()) {
    switch (backend) {
      case at::SDPBackend::cudnn_attention:
        if (context.userEnabledCuDNNSDP() && batched) return backend;
        break;
      case at::SDPBackend::flash_attention:
        if (context.userEnabledFlashSDP()) return at::SDPBackend::overrideable;
        break;
      case at::SDPBackend::overrideable:
        if (context.userEnabledOverrideableSDP()) return backend;
        break;
      case at::SDPBackend::math:
        if (context.userEnabledMathSDP()) return backend;
        break;
      default:
        break;
    }
  }
  return at::SDPBackend::overrideable;  // (the CPU took flash: it is enabled)
}

// The CPU's choice (for the heads as the kernel will see them), narrowed to what
// the fused operators can carry: they take no dropout (the CPU kernel would
// draw from the CPU's generator) and give no gradient for a mask. Grouped-query
// attention, which scaled_dot_product_attention does not pass on, they
// recognise by the head counts, as a GPU's fused kernels do.
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
  return static_cast<int64_t>(fused ? named_operator(query, key, value) : at::SDPBackend::math);
}

// `t` in the layout the operators' meta kernels promise (compiled graphs check
// their outputs' strides against them): `like`'s, as PyTorch's own SDPA
// kernels allocate their outputs.
Tensor laid_out_like(const Tensor& t, const Tensor& like) {
  Tensor laid_out;
  at::native::alloc_with_matching_layout(like, laid_out, t.sizes().vec());
  return laid_out.strides() == t.strides() ? t : laid_out.copy_(t);
}

// Says for the CPU kernel's launch that follows how many query heads each key head serves
// (the part's kernel groups them; the CPU kernel takes the key heads repeated), and forgets
// it when the caller returns, read or not: a call that throws leaves no group behind.
auto group_for_next_launch(int64_t groups) {
  if (groups > 1 && observers::watched()) describe_next_attention_group(groups);
  return c10::make_scope_exit([] { take_next_attention_group(); });
}

// Attention's output and its logsumexp ([..., heads, query] in float32), as
// every fused operator computes them; `op` names the operator for errors.
std::pair<Tensor, Tensor> attend(const char* op, const Tensor& query, const Tensor& key, const Tensor& value,
                                 const std::optional<Tensor>& mask, double dropout_p, bool is_causal,
                                 bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, op, " on simhpu: dropout_p must be 0 (got ", dropout_p,
              "); scaled_dot_product_attention takes the math path for dropout");
  TORCH_CHECK(!return_debug_mask, op, " on simhpu: no debug mask");
  const int64_t groups = query_heads_per_kv_head(query, key);
  // (What fits the CPU kernel to the operator is simhpu's own work: a part's fused kernel
  // groups heads, writes float32 statistics and lays out its output itself.)
  std::optional<OwnWorkScope> fitting(std::in_place);
  const Tensor key_heads = per_query_head(key, groups), value_heads = per_query_head(value, groups);
  fitting.reset();
  const auto said = group_for_next_launch(groups);
  auto [output, logsumexp] = at::_scaled_dot_product_flash_attention_for_cpu(
      query, key_heads, value_heads, dropout_p, is_causal, mask, scale);
  fitting.emplace();
  // The CPU kernel's logsumexp is [batch, query, heads] in its compute dtype;
  // the operators' is [batch, heads, query] in float32.
  return {laid_out_like(output, query), logsumexp.to(at::kFloat).contiguous()};
}

// The gradients of query, key and value, from the logsumexp `attend` wrote.
std::tuple<Tensor, Tensor, Tensor> attend_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key,
                                                   const Tensor& value, const Tensor& mask, const Tensor& out,
                                                   const Tensor& logsumexp, double dropout_p, bool is_causal,
                                                   std::optional<double> scale) {
  const auto compute_dtype = at::toOpMathType(query.scalar_type());
  const int64_t groups = query_heads_per_kv_head(query, key);
  std::optional<OwnWorkScope> fitting(std::in_place);  // (as in the forward)
  const Tensor key_heads = per_query_head(key, groups), value_heads = per_query_head(value, groups);
  const Tensor kernel_logsumexp = logsumexp.to(compute_dtype).transpose(1, 2).contiguous().transpose(1, 2);
  fitting.reset();
  const auto said = group_for_next_launch(groups);
  auto [grad_q, grad_k, grad_v] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, query, key_heads, value_heads, out, kernel_logsumexp, dropout_p, is_causal,
      mask.defined() ? std::optional<Tensor>(mask) : std::nullopt, scale);
  fitting.emplace();
  if (groups > 1) {  // each key/value head's gradient: the sum over the query heads it served
    grad_k = grad_k.unflatten(-3, {key.size(-3), groups}).sum(-3);
    grad_v = grad_v.unflatten(-3, {value.size(-3), groups}).sum(-3);
  }
  return {laid_out_like(grad_q, query), laid_out_like(grad_k, key), laid_out_like(grad_v, value)};
}

// Neither operator draws randomness: their seed and offset are 0 (a value, so that
// a compiled graph's outputs equal eager's), which the part's kernel writes itself.
Tensor no_seed(const Tensor& query) {
  const OwnWorkScope own_work;
  return at::zeros({}, query.options().dtype(at::kLong));
}

std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor> overrideable_forward(
    const Tensor& query, const Tensor& key, const Tensor& value, const std::optional<Tensor>& attn_bias,
    double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  auto [output, logsumexp] = attend("_scaled_dot_product_fused_attention_overrideable", query, key, value, attn_bias,
                                    dropout_p, is_causal, return_debug_mask, scale);
  return {output, logsumexp, Tensor(), Tensor(), query.sym_size(-2), key.sym_size(-2),
          no_seed(query), no_seed(query), Tensor()};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> overrideable_backward(
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
  auto [grad_q, grad_k, grad_v] =
      attend_backward(grad_out, query, key, value, attn_bias, out, logsumexp, dropout_p, is_causal, scale);
  Tensor grad_bias = attn_bias.defined() ? at::empty_like(attn_bias) : Tensor();
  return {grad_q, grad_k, grad_v, grad_bias};
}

// cuDNN's operators: the same kernels; their logsumexp keeps a trailing
// dimension of 1 ([B, H, L, 1]), as PyTorch's meta kernel for them says.
std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor> cudnn_forward(
    const Tensor& query, const Tensor& key, const Tensor& value, const std::optional<Tensor>& attn_bias,
    bool /*compute_log_sumexp: always*/, double dropout_p, bool is_causal, bool return_debug_mask,
    std::optional<double> scale) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4,
              "_scaled_dot_product_cudnn_attention on simhpu: query, key and value must be 4-D [batch, heads, "
              "length, dim] (got ", query.dim(), "-D, ", key.dim(), "-D and ", value.dim(), "-D)");
  auto [output, logsumexp] = attend("_scaled_dot_product_cudnn_attention", query, key, value, attn_bias, dropout_p,
                                    is_causal, return_debug_mask, scale);
  return {output, logsumexp.unsqueeze(-1), Tensor(), Tensor(), query.sym_size(-2), key.sym_size(-2),
          no_seed(query), no_seed(query), Tensor()};
}

std::tuple<Tensor, Tensor, Tensor> cudnn_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& out,
    const Tensor& logsumexp, const Tensor& /*philox_seed*/, const Tensor& /*philox_offset*/,
    const Tensor& attn_bias, const Tensor& /*cum_seq_q*/, const Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/,
    c10::SymInt /*max_k*/, double dropout_p, bool is_causal, std::optional<double> scale) {
  TORCH_CHECK(logsumexp.dim() == 4 && logsumexp.size(-1) == 1,
              "_scaled_dot_product_cudnn_attention_backward on simhpu: logsumexp must be the forward's "
              "[batch, heads, length, 1] (got ", logsumexp.sizes(), ")");
  if (!grad_out.defined()) {
    return {};
  }
  return attend_backward(grad_out, query, key, value, attn_bias, out, logsumexp.squeeze(-1), dropout_p, is_causal,
                         scale);
}

} // namespace
} // namespace simhpu::attention

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &simhpu::attention::fused_sdp_choice)
} // namespace at::native

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace simhpu::attention;
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(overrideable_forward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(overrideable_backward));
  m.impl("_scaled_dot_product_cudnn_attention", TORCH_FN(cudnn_forward));
  m.impl("_scaled_dot_product_cudnn_attention_backward", TORCH_FN(cudnn_backward));
}
