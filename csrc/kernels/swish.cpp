// swish(x) = x * sigmoid(beta * x), computed in float for reduced precisions.
#include "generated/kernel_signatures/swish.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_api.h"

#include <cmath>

namespace simhpu::kernels {

void swish(const DeviceTensor& self, double beta, const Out<DeviceTensor>& out) {
  SIMHPU_DISPATCH_FLOATING(out.dtype, "swish", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t b = static_cast<acc_t>(beta);
    elementwise<scalar_t>(out, [b](scalar_t v) {
      const acc_t x = v;
      return x / (acc_t(1) + std::exp(-b * x));
    }, self);
  });
}
SIMHPU_KERNEL(swish);

} // namespace simhpu::kernels
