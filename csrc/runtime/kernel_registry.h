#pragma once
// Device kernels registered by name (this device's counterpart of aclnn).
#include "runtime/build_info.h"
#include "runtime/launch_record.h"

#include <string>
#include <vector>

namespace simhpu {

// Registers a kernel at static-initialisation time; see SIMHPU_KERNEL.
// `built` is what the registering code was compiled against: a kernel from a
// package built for another release is kept, but launching it raises why.
struct KernelRegistrar {
  KernelRegistrar(const char* name, KernelFn run, KernelSignature signature, const BuildInfo& built);
  // The form of earlier releases (no signature), kept so a package built for
  // one still loads and is refused by its build stamp when its kernel is used.
  KernelRegistrar(const char* name, KernelFn run, const BuildInfo& built = SIMHPU_THIS_BUILD);
};

// The kernel called `name`; throws naming the kernel (and `op`, the operator
// launching it, when given) if none is registered or it cannot run here.
const KernelDef& find_kernel(const char* name, const char* op = nullptr);

std::vector<std::string> registered_kernel_names();

} // namespace simhpu
