// Elementwise binary kernels: add_custom (npu_add_custom), and add/mul, which
// serve aten::add.Tensor, aten::mul.Tensor and npu_scaled_add.
#include "generated/kernel_signatures/add.h"
#include "generated/kernel_signatures/add_custom.h"
#include "generated/kernel_signatures/mul.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_api.h"

namespace simhpu::kernels {

void add_custom(const DeviceTensor& x, const DeviceTensor& y, const Out<DeviceTensor>& out) {
  SIMHPU_DISPATCH_FLOATING(out.dtype, "add_custom", [&] {
    elementwise<scalar_t>(out, [](scalar_t a, scalar_t b) { return a + b; }, x, y);
  });
}
SIMHPU_KERNEL(add_custom);

void add(const DeviceTensor& self, const DeviceTensor& other, const c10::Scalar& alpha, const Out<DeviceTensor>& out) {
  SIMHPU_DISPATCH_FLOATING(out.dtype, "add", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const acc_t a = alpha.to<acc_t>();
    elementwise<scalar_t>(out, [a](scalar_t x, scalar_t y) { return acc_t(x) + a * acc_t(y); }, self, other);
  });
}
SIMHPU_KERNEL(add);

void mul(const DeviceTensor& self, const DeviceTensor& other, const Out<DeviceTensor>& out) {
  SIMHPU_DISPATCH_FLOATING(out.dtype, "mul", [&] {
    elementwise<scalar_t>(out, [](scalar_t x, scalar_t y) { return x * y; }, self, other);
  });
}
SIMHPU_KERNEL(mul);


} // namespace simhpu::kernels
