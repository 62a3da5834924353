// nn.TransformerEncoderLayer's and nn.MultiheadAttention's inference fast path (eval mode, no grad):
// torch._transformer_encoder_layer_fwd and torch._native_multi_head_attention, which ATen registers
// for the CPU and CUDA only. Without a kernel here the reference path ran each as one CPU kernel, one
// launch for a whole encoder layer: simulated time priced it as elementwise work (a 1,024-wide layer
// over 8 x 512 tokens at 29 us on an H100, a seventh of its GEMMs' time). ATen's own implementations
// are composites of ATen operators (linear, bmm, the masked softmax, layer norm, ...), device-generic
// despite the "cpu" in one's name, so the device runs them operator by operator, and each is priced
// as the part runs it. (Its attention is fused where the composite's conditions allow, bmm and a
// masked softmax otherwise, where a GPU's multi-head attention may still take a fused kernel.)
#include <ATen/core/Tensor.h>
#include <ATen/ops/_native_multi_head_attention_native.h>
#include <ATen/ops/_transformer_encoder_layer_fwd_native.h>
#include <torch/library.h>

namespace simhpu {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(at::native::transformer_encoder_layer_forward));
  m.impl("_native_multi_head_attention", TORCH_FN(at::native::native_multi_head_attention_cpu));
}

} // namespace simhpu
