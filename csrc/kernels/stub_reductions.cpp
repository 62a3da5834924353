// Reductions for stub entries (exec: NAME): the iterator's output has stride 0
// along the reduced dimensions, and the input the iterator's full shape. Dense
// floating inputs take sum_dims' vector loops (reduce_sum.h); otherwise each
// output element is summed by one task, in a wider accumulator than the
// element type (double for floating types, int64 for integers).
#include "aten/stub_launch.h"
#include "kernels/kernel_api.h"
#include "kernels/reduce_sum.h"

#include <ATen/AccumulateType.h>
#include <ATen/Parallel.h>

namespace simhpu::stubs {
namespace {

template <typename scalar_t>
void sum_loop(const DeviceTensor& out, const DeviceTensor& in) {
  using acc_t = at::acc_type<scalar_t, /*is_cuda=*/false>;
  // The output's dimensions, and the reduced ones (stride 0 in the output).
  c10::SmallVector<int64_t, 6> kept, reduced;
  for (int64_t d = 0; d < in.dim(); ++d) {
    (out.strides[d] == 0 && in.sizes[d] > 1 ? reduced : kept).push_back(d);
  }
  int64_t outputs = 1, per_output = 1;
  for (int64_t d : kept) outputs *= in.sizes[d];
  for (int64_t d : reduced) per_output *= in.sizes[d];
  auto* o = out.data_as<scalar_t>();
  const auto* x = in.data_as<const scalar_t>();
  at::parallel_for(0, outputs, std::max<int64_t>(1, 32768 / std::max<int64_t>(per_output, 1)),
                   [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) {
      int64_t out_offset = 0, in_base = 0, rest = index;
      for (int64_t k = static_cast<int64_t>(kept.size()) - 1; k >= 0; --k) {
        const int64_t d = kept[k], i = rest % in.sizes[d];
        rest /= in.sizes[d];
        out_offset += i * out.strides[d];
        in_base += i * in.strides[d];
      }
      acc_t total = 0;
      for (int64_t r = 0; r < per_output; ++r) {
        int64_t in_offset = in_base, left = r;
        for (int64_t k = static_cast<int64_t>(reduced.size()) - 1; k >= 0; --k) {
          const int64_t d = reduced[k];
          in_offset += (left % in.sizes[d]) * in.strides[d];
          left /= in.sizes[d];
        }
        total += static_cast<acc_t>(x[in_offset]);
      }
      o[out_offset] = static_cast<scalar_t>(total);
    }
  });
}

} // namespace

// sum_stub's kernel: out = the sum of in over the dimensions out does not keep.
void sum_over_iterator(IteratorOperands& operands) {
  if (kernels::sum_over_zero_strides(operands.input(0), operands.output(0))) {
    return;
  }
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, operands.dtype(), "sum_over_iterator", [&] {
    sum_loop<scalar_t>(operands.output(0), operands.input(0));
  });
}
SIMHPU_STUB_KERNEL(sum_over_iterator);

} // namespace simhpu::stubs
