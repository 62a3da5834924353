// Device-to-device copy, with dtype conversion and any strides (ATen's CPU copy
// routine does the element work on the device's memory).
#include "generated/kernel_signatures/copy.h"
#include "kernels/kernel_api.h"

namespace simhpu::kernels {

void copy(const DeviceTensor& src, const Out<DeviceTensor>& dst) {
  dst.cpu_view().copy_(src.cpu_view());
}
SIMHPU_KERNEL(copy);

} // namespace simhpu::kernels
