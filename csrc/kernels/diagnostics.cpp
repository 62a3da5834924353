// A kernel that always fails, so tests can show how an asynchronous kernel
// failure travels to the next synchronising call (like a device-side assert).
#include "kernels/kernel_api.h"

namespace simhpu::kernels {

void fail_on_device(const DeviceTensor& t) {
  TORCH_CHECK(false, "device-side check failed on a tensor of ", t.numel(), " elements");
}
SIMHPU_KERNEL(fail_on_device);

} // namespace simhpu::kernels
