// Diagnostic kernels for tests and benchmarks: one that does nothing (to
// measure the launch queue itself), one that always fails, to show how an
// asynchronous failure travels to the next synchronising call (like a
// device-side assert), and one that takes a set time, to show streams
// overlapping and events timing them.
#include "kernels/kernel_api.h"

#include <chrono>
#include <thread>

namespace simhpu::kernels {

void empty_kernel() {}
SIMHPU_KERNEL(empty_kernel);

void fail_on_device(const DeviceTensor& t) {
  TORCH_CHECK(false, "device-side check failed on a tensor of ", t.numel(), " elements");
}
SIMHPU_KERNEL(fail_on_device);

void sleep_on_device(const DeviceTensor& t, int64_t microseconds) {
  (void)t;
  std::this_thread::sleep_for(std::chrono::microseconds(microseconds));
}
SIMHPU_KERNEL(sleep_on_device);

} // namespace simhpu::kernels
