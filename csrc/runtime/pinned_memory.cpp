#include "runtime/pinned_memory.h"

#include "sanitizer/stream_sanitizer.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace simhpu {
namespace {

constexpr size_t kPageSize = 4096;

struct PinnedBlocks {
  std::mutex mu;
  std::map<const char*, size_t> by_start;  // block start -> size
};

PinnedBlocks& blocks() {
  static auto* b = new PinnedBlocks();  // outlives every pinned tensor
  return *b;
}

void free_pinned(void* ptr) {
  sanitizer::on_pinned_free(ptr);  // a guarded block is writable again first
  {
    std::lock_guard<std::mutex> lock(blocks().mu);
    blocks().by_start.erase(static_cast<const char*>(ptr));
  }
  std::free(ptr);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const size_t size = std::max<size_t>(kPageSize, (nbytes + kPageSize - 1) / kPageSize * kPageSize);
    void* ptr = std::aligned_alloc(kPageSize, size);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "simhpu: could not allocate ", nbytes,
                     " bytes of pinned host memory");
    {
      std::lock_guard<std::mutex> lock(blocks().mu);
      blocks().by_start[static_cast<const char*>(ptr)] = size;
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &free_pinned;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

PinnedAllocator the_pinned_allocator;

} // namespace

c10::Allocator* pinned_allocator() {
  return &the_pinned_allocator;
}

bool is_pinned(const void* ptr) {
  const char* start = nullptr;
  size_t size = 0;
  return pinned_block_of(ptr, &start, &size);
}

bool pinned_block_of(const void* ptr, const char** start, size_t* size) {
  const char* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(blocks().mu);
  auto it = blocks().by_start.upper_bound(p);
  if (it == blocks().by_start.begin()) {
    return false;
  }
  --it;
  if (p >= it->first + it->second) {
    return false;
  }
  *start = it->first;
  *size = it->second;
  return true;
}

} // namespace simhpu
