// Diagnostic kernels for tests and benchmarks: one that does nothing (to
// measure the launch queue itself), one that always fails, to show how an
// asynchronous failure travels to the next synchronising call (like a
// device-side assert), and one that takes a set time, to show streams
// overlapping and events timing them; and one that reports the ATen
// thread-local state kernels run under.
#include "generated/kernel_signatures/empty_kernel.h"
#include "generated/kernel_signatures/fail_on_device.h"
#include "generated/kernel_signatures/report_worker_state.h"
#include "generated/kernel_signatures/sleep_on_device.h"
#include "kernels/kernel_api.h"

#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <chrono>
#include <thread>

namespace simhpu::kernels {

void empty_kernel() {}
SIMHPU_KERNEL(empty_kernel);

// Fails as a kernel that fails part-way through writing t: what it wrote is undefined.
void fail_on_device(const Out<DeviceTensor>& t) {
  TORCH_CHECK(false, "device-side check failed on a tensor of ", t.numel(), " elements");
}
SIMHPU_KERNEL(fail_on_device);

void sleep_on_device(int64_t microseconds) {
  std::this_thread::sleep_for(std::chrono::microseconds(microseconds));
}
SIMHPU_KERNEL(sleep_on_device);

// state[0..3] = grad mode, forward grad mode, autograd keys not excluded, keys beyond the defaults included (1: yes).
void report_worker_state(const Out<DeviceTensor>& state) {
  int64_t* out = state.data_as<int64_t>();
  out[0] = c10::GradMode::is_enabled();
  out[1] = c10::AutogradState::get_tls_state().get_fw_grad_mode();
  const c10::impl::LocalDispatchKeySet keys = c10::impl::tls_local_dispatch_key_set();
  out[2] = !keys.excluded_.isSupersetOf(c10::autograd_dispatch_keyset);
  // A key the launching thread included (a Python dispatch mode, autocast) would reroute the kernel's ATen calls.
  out[3] = keys.included_ != c10::default_included_set;
}
SIMHPU_KERNEL(report_worker_state);

} // namespace simhpu::kernels
