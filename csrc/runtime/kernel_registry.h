#pragma once
// Device kernels registered by name (this device's counterpart of aclnn).
#include "runtime/launch_record.h"

#include <string>
#include <vector>

namespace simhpu {

// Registers a kernel at static-initialisation time; see SIMHPU_KERNEL.
struct KernelRegistrar {
  KernelRegistrar(const char* name, KernelFn run);
};

// The kernel called `name`; throws naming the kernel if none is registered.
const KernelDef& find_kernel(const char* name);

std::vector<std::string> registered_kernel_names();

} // namespace simhpu
