// Sum over a list of dimensions. Each input element is added into the output
// element it reduces to; accumulation is in float (double for double).
#include "kernels/kernel_api.h"

#include <vector>

namespace simhpu::kernels {

void sum_dims(const DeviceTensor& self, c10::IntArrayRef dim, bool keepdim, const DeviceTensor& out) {
  const int64_t dims = self.dim();
  // Output stride of each input dimension: 0 where the dimension is reduced.
  std::vector<bool> reduced(dims, dim.empty());
  for (int64_t d : dim) {
    reduced[d < 0 ? d + dims : d] = true;
  }
  std::vector<int64_t> out_stride(dims, 0);
  for (int64_t d = 0, od = 0; d < dims; ++d) {
    if (reduced[d]) {
      od += keepdim ? 1 : 0;
      continue;
    }
    out_stride[d] = out.strides[od++];
  }
  SIMHPU_DISPATCH_FLOATING(self.dtype, "sum_dims", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t out_n = out.numel();
    std::vector<acc_t> acc(out_n, acc_t(0));
    const scalar_t* in = self.data_as<const scalar_t>();
    std::vector<int64_t> index(dims, 0);
    const int64_t n = self.numel();
    int64_t in_off = 0, out_off = 0;
    for (int64_t i = 0; i < n; ++i) {
      acc[out_off] += acc_t(in[in_off]);
      for (int64_t d = dims - 1; d >= 0; --d) {  // advance the N-d index
        if (++index[d] < self.sizes[d]) {
          in_off += self.strides[d];
          out_off += out_stride[d];
          break;
        }
        in_off -= (self.sizes[d] - 1) * self.strides[d];
        out_off -= (self.sizes[d] - 1) * out_stride[d];
        index[d] = 0;
      }
    }
    // The output is freshly allocated and contiguous, so acc maps onto it 1:1.
    scalar_t* o = out.data_as<scalar_t>();
    for (int64_t i = 0; i < out_n; ++i) {
      o[i] = static_cast<scalar_t>(acc[i]);
    }
  });
}
SIMHPU_KERNEL(sum_dims);

} // namespace simhpu::kernels
