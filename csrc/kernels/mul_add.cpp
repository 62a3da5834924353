// Two results from one pass over the inputs: prod = x * y, total = x + z.
#include "generated/kernel_signatures/mul_add.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_api.h"

namespace simhpu::kernels {

void mul_add(const DeviceTensor& x, const DeviceTensor& y, const DeviceTensor& z,
             const Out<DeviceTensor>& prod, const Out<DeviceTensor>& total) {
  SIMHPU_DISPATCH_FLOATING(x.dtype, "mul_add", [&] {
    elementwise<scalar_t>(prod, [](scalar_t a, scalar_t b) { return a * b; }, x, y);
    elementwise<scalar_t>(total, [](scalar_t a, scalar_t c) { return a + c; }, x, z);
  });
}
SIMHPU_KERNEL(mul_add);

} // namespace simhpu::kernels
