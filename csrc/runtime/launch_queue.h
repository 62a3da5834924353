#pragma once
// The asynchronous launch path: kernels are queued per device and executed by
// that device's worker thread, in order. Host code returns as soon as a launch
// is queued; synchronize() (and everything that reads device memory from the
// host) waits for the queue to drain and raises the first kernel failure.
#include "runtime/kernel_arg.h"

#include <c10/core/Device.h>
#include <c10/core/Storage.h>

namespace simhpu {

using KernelFn = void (*)(KernelArgs& args);

// A device kernel as the runtime knows it: a name and an entry point.
struct KernelDef {
  const char* name;
  KernelFn run;
};

// One queued kernel call. `keep_alive` holds the storages of every tensor
// argument so their memory cannot be freed while the kernel is pending.
struct LaunchRecord {
  const KernelDef* kernel = nullptr;
  const char* op_name = "";
  KernelArgs args;
  c10::SmallVector<c10::Storage, 4> keep_alive;
};

// True when SIMHPU_LAUNCH_BLOCKING=1: kernels run inside the launching call.
bool launch_blocking();

// Queue `record` on `device` (or run it now in blocking mode).
void submit(c10::DeviceIndex device, LaunchRecord&& record);

// Wait until every kernel queued on `device` has run; raise the first failure.
void synchronize_device(c10::DeviceIndex device);
void synchronize_all_devices();

} // namespace simhpu
