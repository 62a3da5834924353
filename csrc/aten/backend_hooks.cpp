// Operators PyTorch sends only to accelerator backends, for which ATen has no
// CPU kernel to serve as the reference: convolutions (a PrivateUse1 backend
// gets convolution_overrideable), the fused LSTM/GRU cells nn.LSTM/nn.GRU use
// on accelerators, native_dropout, whose CPU kernel draws from the CPU's
// generator, and composites that check for CPU/CUDA by name. Each is written here in terms of operators that do have reference
// kernels, so they run asynchronously on the device like any other.
#include "aten/fallback.h"
#include "runtime/launch_work.h"
#include "runtime/observers.h"
#include "runtime/own_work.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace simhpu {
namespace {

c10::OperatorHandle aten_op(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

// convolution_overrideable has the very arguments of aten::convolution, which
// has a meta kernel and a CPU kernel.
void convolution_overrideable(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static const c10::OperatorHandle convolution = aten_op("aten::convolution", "");
  reference_fallback(convolution, stack);
}

// convolution_backward takes one more argument than the overrideable hook:
// the bias's sizes (after weight), which only shape grad_bias.
void convolution_backward_overrideable(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static const c10::OperatorHandle backward = aten_op("aten::convolution_backward", "");
  // grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask
  const size_t first = stack->size() - 10;
  const at::Tensor weight = (*stack)[first + 2].toTensor();
  const bool transposed = (*stack)[first + 6].toBool();
  const int64_t groups = (*stack)[first + 8].toInt();
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(first + 3),
                c10::IValue(std::vector<int64_t>{channels}));
  reference_fallback(backward, stack);
}

at::Tensor with_biases(const at::Tensor& gates, const std::optional<at::Tensor>& a,
                       const std::optional<at::Tensor>& b) {
  at::Tensor out = gates;
  if (a && a->defined()) out = out + *a;
  if (b && b->defined()) out = out + *b;
  return out;
}

// workspace = [input, forget, cell, output] gates after their activations.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  const auto gates = (with_biases(input_gates, input_bias, hidden_bias) + hidden_gates).chunk(4, 1);
  const at::Tensor i = gates[0].sigmoid(), f = gates[1].sigmoid(), g = gates[2].tanh(), o = gates[3].sigmoid();
  at::Tensor cy = f * cx + i * g;
  at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy_opt, const std::optional<at::Tensor>& grad_cy_opt,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const auto gates = workspace.chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  const at::Tensor grad_hy = grad_hy_opt && grad_hy_opt->defined() ? *grad_hy_opt : at::zeros_like(cy);
  const at::Tensor tanh_cy = cy.tanh();
  at::Tensor grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy);
  if (grad_cy_opt && grad_cy_opt->defined()) grad_c = grad_c + *grad_cy_opt;
  at::Tensor grad_gates = at::cat({grad_c * g * i * (1 - i), grad_c * cx * f * (1 - f), grad_c * i * (1 - g * g),
                                   grad_hy * tanh_cy * o * (1 - o)},
                                  1);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, grad_c * f, grad_bias};
}

// workspace = [reset, update, new] gates after their activations, hx, and the
// hidden part of the new gate.
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  const auto in = with_biases(input_gates, input_bias, std::nullopt).chunk(3, 1);
  const auto hid = with_biases(hidden_gates, hidden_bias, std::nullopt).chunk(3, 1);
  const at::Tensor r = (in[0] + hid[0]).sigmoid();
  const at::Tensor z = (in[1] + hid[1]).sigmoid();
  const at::Tensor n = (in[2] + r * hid[2]).tanh();
  at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hid[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const auto w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const at::Tensor grad_n = grad_hy * (1 - z) * (1 - n * n);
  const at::Tensor grad_z = grad_hy * (hx - n) * z * (1 - z);
  const at::Tensor grad_r = grad_n * hn * r * (1 - r);
  at::Tensor grad_input_gates = at::cat({grad_r, grad_z, grad_n}, 1);
  at::Tensor grad_hidden_gates = at::cat({grad_r, grad_z, grad_n * r}, 1);
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {grad_input_gates, grad_hidden_gates, grad_hy * z, grad_input_bias, grad_hidden_bias};
}

// As ATen's CPU kernel, but the mask is drawn from the device's generator
// (bernoulli_ on the device). A part runs the whole operator as one kernel that
// reads the input once and writes the output and the mask: the draw's launch
// stands for it (its bytes those three tensors'), and the multiplies that apply
// the mask are simhpu's own work (runtime/own_work.h).
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) {
    return {input, at::empty_like(input)};
  }
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  const double keep = 1.0 - p;
  const double scale = keep == 0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  if (observers::watched()) {
    LaunchWork fused;
    fused.bytes = 2.0 * static_cast<double>(input.nbytes()) + static_cast<double>(mask.nbytes());
    describe_next_launch(fused);
  }
  mask.bernoulli_(keep);
  OwnWorkScope applying_the_mask;
  return {input * mask * scale, mask};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution_overrideable>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&convolution_backward_overrideable>());
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  // Composite kernels that refuse devices other than CPU/CUDA/XPU by name: on
  // the reference path they run on CPU tensors, and are content.
  m.impl("mode.values", torch::CppFunction::makeFromBoxedFunction<&reference_fallback>());
  // Backward operators whose CPU and CUDA kernels are fused, while a device with
  // no kernel of its own takes their decomposition (CompositeImplicitAutograd),
  // which rounds differently: served by the CPU kernel, the device computes the
  // CPU's bits, as CUDA serves its fused kernel. Their own backward is not
  // needed: autograd calls them only with grad mode off (derivatives.yaml).
  m.impl("silu_backward", torch::CppFunction::makeFromBoxedFunction<&reference_fallback>());
  m.impl("mish_backward", torch::CppFunction::makeFromBoxedFunction<&reference_fallback>());
}

} // namespace simhpu
