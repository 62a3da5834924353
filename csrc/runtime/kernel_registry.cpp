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
  // Kernels registered by code built against another release: name -> why not.
  std::unordered_map<std::string, std::string> refused;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

} // namespace

// Runs while a library is being loaded, where an exception cannot reach
// Python: problems are kept and raised when the kernel is looked up.
KernelRegistrar::KernelRegistrar(const char* name, KernelFn run, const BuildInfo& built)
    : KernelRegistrar(name, run, KernelSignature{}, built) {}

KernelRegistrar::KernelRegistrar(const char* name, KernelFn run, KernelSignature signature, const BuildInfo& built) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string mismatch = build_mismatch(built, std::string("kernel '") + name + "'");
  if (!mismatch.empty()) {
    r.refused.emplace(name, std::move(mismatch));
    return;
  }
  auto [it, inserted] = r.kernels.emplace(name, KernelDef{name, run, nullptr, nullptr, nullptr, signature});
  if (!inserted) {
    r.refused.emplace(name, std::string("kernel '") + name +
                                "' is registered twice (by two libraries, or twice in one); kernel names "
                                "are global, so give a package's kernels a prefix of its own");
  }
}

const KernelDef& find_kernel(const char* name, const char* op) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // (TORCH_CHECK builds its message only when the check fails.)
  const char* who = op ? op : "simhpu";
  auto refused = r.refused.find(name);
  TORCH_CHECK(refused == r.refused.end(), who, ": ", refused->second);
  auto it = r.kernels.find(name);
  TORCH_CHECK(it != r.kernels.end(), who, ": no device kernel named '", name,
              "' is registered; a kernel registers with SIMHPU_KERNEL(", name,
              ") in the library that defines it (csrc/kernels/ in this project; an operator package's "
              "library must be loaded first)");
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
