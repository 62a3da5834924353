#include "runtime/kernel_registry.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace simhpu {
namespace {

struct Registry {
  std::mutex mu;
  // Node-based map: references to elements stay valid as it grows.
  std::unordered_map<std::string, KernelDef> kernels;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

} // namespace

KernelRegistrar::KernelRegistrar(const char* name, KernelFn run) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, inserted] = r.kernels.emplace(name, KernelDef{name, run});
  TORCH_CHECK(inserted, "simhpu: kernel '", name, "' is registered twice");
}

const KernelDef& find_kernel(const char* name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.kernels.find(name);
  TORCH_CHECK(it != r.kernels.end(), "simhpu: no device kernel named '", name,
              "' is registered (kernels live in csrc/kernels/ and register with SIMHPU_KERNEL)");
  return it->second;
}

std::vector<std::string> registered_kernel_names() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& entry : r.kernels) {
    names.push_back(entry.first);
  }
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace simhpu
