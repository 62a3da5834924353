#include "runtime/undefined_memory.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace simhpu {
namespace {

struct Registry {
  std::atomic<size_t> count{0};  // entries in `by_block`, read without the lock
  std::mutex mu;
  std::unordered_map<const void*, FailureMessage> by_block;
};

Registry& registry() {
  static auto* r = new Registry();  // never destroyed: workers may still run at exit
  return *r;
}

const void* block_of(const c10::Storage& storage) {
  if (!storage || storage.device_type() != c10::DeviceType::PrivateUse1 || storage.nbytes() == 0) {
    return nullptr;
  }
  return storage.data();
}

} // namespace

void mark_undefined(const c10::Storage& storage, const FailureMessage& failure) {
  const void* block = block_of(storage);
  if (block == nullptr) {
    return;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.by_block.try_emplace(block, failure);  // the first failure is the cause
  r.count.store(r.by_block.size(), std::memory_order_release);
}

bool any_undefined() {
  return registry().count.load(std::memory_order_acquire) != 0;
}

FailureMessage undefined_by(const c10::Storage& storage) {
  if (!any_undefined()) {
    return nullptr;
  }
  Registry& r = registry();
  const void* block = block_of(storage);
  if (block == nullptr) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_block.find(block);
  return it == r.by_block.end() ? nullptr : it->second;
}

void forget_undefined(const void* block) {
  if (!any_undefined()) {
    return;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.by_block.erase(block);
  r.count.store(r.by_block.size(), std::memory_order_release);
}

void check_defined(const at::Tensor& t, const char* op) {
  if (!t.defined() || !t.is_privateuseone() || !t.has_storage()) {
    return;
  }
  if (FailureMessage failure = undefined_by(t.storage())) {
    TORCH_CHECK(false, op, ": the tensor's memory was left undefined by a kernel that failed earlier, so it "
                "cannot be read (allocate a new tensor to go on); the failure was: ", *failure);
  }
}

} // namespace simhpu
