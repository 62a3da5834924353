#pragma once
// The vectorised [outer, reduced, inner] sums of reduce_sum.cpp, for other
// kernels whose reductions fit them.
#include "runtime/kernel_arg.h"

namespace simhpu::kernels {

// out = the sum of `in` over the dimensions along which `out` has stride 0 (a
// TensorIterator's reduction operands: both have the iterator's shape). Done,
// and true, when `in` is floating, dense and the reduced dimensions adjacent
// once ordered by stride, and out's kept dimensions dense in the same order;
// false, with nothing written, otherwise. Accumulates in ATen's accumulate type
// (double for float), as the stub's general loop does: sums that feed a line
// search (LBFGS's strong Wolfe) drift from the CPU's with float partial sums.
bool sum_over_zero_strides(const DeviceTensor& in, const DeviceTensor& out);

} // namespace simhpu::kernels
