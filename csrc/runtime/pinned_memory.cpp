#include "runtime/pinned_memory.h"

#include "runtime/observers.h"

#include <c10/util/Exception.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

namespace simhpu {
namespace {

constexpr size_t kPageSize = 4096;

// One block: the same pages at two addresses (program: the tensor's data
// pointer; kernel: what launches use).
using PinnedBlock = PinnedViews;

// Freed blocks are kept for the next request of their size, as PyTorch's
// caching host allocator keeps pinned memory (a fresh block costs a memfd and
// two mappings; pinning on real hardware costs far more). Launches hold a
// block's storage until they ran, so a freed block is no longer in use.
constexpr size_t kMaxCachedBytes = size_t(256) << 20;

struct PinnedBlocks {
  std::mutex mu;
  std::map<const char*, size_t> by_start;  // program view start -> size (cached blocks too)
  std::multimap<size_t, PinnedBlock*> cached;  // by size
  size_t cached_bytes = 0;
};

PinnedBlocks& blocks() {
  static auto* b = new PinnedBlocks();  // outlives every pinned tensor
  return *b;
}

void unmap(PinnedBlock* block) {
  munmap(block->program, block->size);
  munmap(block->kernel, block->size);
  delete block;
}

void free_pinned(void* context) {
  auto* block = static_cast<PinnedBlock*>(context);
  observers::on_pinned_free(block->program);  // a guarded block is accessible again first
  {
    std::lock_guard<std::mutex> lock(blocks().mu);
    if (blocks().cached_bytes + block->size <= kMaxCachedBytes) {
      blocks().cached.emplace(block->size, block);
      blocks().cached_bytes += block->size;
      return;
    }
    blocks().by_start.erase(block->program);
  }
  unmap(block);
}

// A cached block of exactly `size` bytes, or null.
PinnedBlock* take_cached(size_t size) {
  std::lock_guard<std::mutex> lock(blocks().mu);
  auto it = blocks().cached.find(size);
  if (it == blocks().cached.end()) return nullptr;
  PinnedBlock* block = it->second;
  blocks().cached.erase(it);
  blocks().cached_bytes -= size;
  return block;
}

// Both views of `size` bytes of fresh shared memory, or null.
PinnedBlock* map_twice(size_t size) {
  const int fd = memfd_create("simhpu-pinned", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto* block = new PinnedBlock{nullptr, nullptr, size};
  if (ftruncate(fd, static_cast<off_t>(size)) == 0) {
    void* program = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void* kernel = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (program != MAP_FAILED) block->program = static_cast<char*>(program);
    if (kernel != MAP_FAILED) block->kernel = static_cast<char*>(kernel);
  }
  close(fd);  // the mappings keep the memory
  if (block->program == nullptr || block->kernel == nullptr) {
    if (block->program != nullptr) munmap(block->program, size);
    if (block->kernel != nullptr) munmap(block->kernel, size);
    delete block;
    return nullptr;
  }
  return block;
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const size_t size = std::max<size_t>(kPageSize, (nbytes + kPageSize - 1) / kPageSize * kPageSize);
    if (PinnedBlock* block = take_cached(size)) {
      return {block->program, block, &free_pinned, c10::Device(c10::DeviceType::CPU)};
    }
    PinnedBlock* block = map_twice(size);
    TORCH_CHECK_WITH(OutOfMemoryError, block != nullptr, "simhpu: could not allocate ", nbytes,
                     " bytes of pinned host memory (", std::strerror(errno), ")");
    {
      std::lock_guard<std::mutex> lock(blocks().mu);
      blocks().by_start[block->program] = size;
    }
    return {block->program, block, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr;  // the data pointer is not the context
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

bool is_pinned_data(const c10::DataPtr& data) {
  return data.get_deleter() == &free_pinned;
}

PinnedViews pinned_views(const c10::DataPtr& data) {
  return *static_cast<const PinnedBlock*>(data.get_context());
}

} // namespace simhpu
