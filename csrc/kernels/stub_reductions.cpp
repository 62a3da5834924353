// Reductions for stub entries (exec: NAME): the iterator's output has stride 0
// along the reduced dimensions, and the input the iterator's full shape.
//
// The arithmetic is the CPU's own: ATen's CPU kernel of the same stub, over the
// same memory. A reduction's result depends on the order it adds in, and
// ATen's CPU sums add in a vectorised cascade; a loop of the device's own adds
// in another order and rounds differently in the last bits, which is all that
// kept whole training runs (torchtitan's, in float32 and bfloat16) from being
// bit-identical to the CPU's. The device keeps its launch, its stream and its
// place in simulated time; only the order of the additions is the CPU's.
#include "aten/stub_launch.h"
#include "kernels/kernel_api.h"

#include <ATen/ops/sum.h>

namespace simhpu::stubs {

// sum_stub's kernel: out = the sum of in over the dimensions out does not keep.
void sum_over_iterator(IteratorOperands& operands) {
  const DeviceTensor& out = operands.output(0);
  // The CPU's sum takes the output in keepdim's shape (size 1 along the reduced
  // dimensions), where the stub's iterator gives it stride 0.
  c10::SmallVector<int64_t, 6> kept_sizes(out.sizes.begin(), out.sizes.end());
  c10::SmallVector<int64_t, 6> reduced;
  for (size_t d = 0; d < kept_sizes.size(); ++d) {
    if (out.strides[d] == 0) {
      kept_sizes[d] = 1;
      reduced.push_back(static_cast<int64_t>(d));
    }
  }
  at::Tensor result = out.cpu_view().as_strided(kept_sizes, out.strides);
  if (reduced.empty()) {  // the reduced dimensions were all of size 1 (an empty list would mean all of them)
    result.copy_(operands.input(0).cpu_view());
    return;
  }
  at::sum_out(result, operands.input(0).cpu_view(), reduced, /*keepdim=*/true, out.dtype);
}
SIMHPU_STUB_KERNEL(sum_over_iterator);

} // namespace simhpu::stubs
