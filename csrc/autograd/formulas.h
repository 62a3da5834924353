#pragma once
// Helpers that derivatives.yaml formulas may call by name, in the spirit of
// PyTorch's FunctionsManual: backward rules too long to write inline.
#include <ATen/TensorOperators.h>  // Tensor-Scalar arithmetic in formulas
#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/SymInt.h>

#include <array>
#include <tuple>

namespace simhpu::formulas {

// For a derivative not written yet (python -m codegen new-op scaffolds it):
// backward through the op raises, naming it.
at::Tensor not_implemented(const char* what);

// Gradient of a sum over `dim`: grad broadcast back to the input's shape.
at::Tensor sum_dims_backward(const at::Tensor& grad, c10::SymIntArrayRef input_sizes,
                             c10::IntArrayRef dim, bool keepdim);

// d/dx [x * sigmoid(beta * x)] applied to grad.
at::Tensor swish_backward(const at::Tensor& grad, const at::Tensor& self, double beta);

// Gradients of npu_mul_add (prod = x * y, total = x + z) for the inputs in
// grad_input_mask; the others are left undefined.
std::tuple<at::Tensor, at::Tensor, at::Tensor> mul_add_backward(
    const at::Tensor& grad_prod, const at::Tensor& grad_total, const at::Tensor& x, const at::Tensor& y,
    std::array<bool, 3> grad_input_mask);

// Gradients of npu_add_rms_norm (total = x + residual, y = rms_norm(total)):
// x and residual both get grad_total plus what flows back through y.
std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm_backward(
    const at::Tensor& grad_y, const at::Tensor& grad_total, const at::Tensor& total, const at::Tensor& gamma,
    const at::Tensor& rstd);

} // namespace simhpu::formulas
