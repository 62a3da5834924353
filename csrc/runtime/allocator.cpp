// The caching device allocator, one cache per device, registered as the
// PrivateUse1 allocator: every device factory allocates through it, and its
// statistics are what torch.simhpu.memory_* and torch.accelerator.memory_*
// report. Freed blocks are kept and handed out again (no trip to the device
// heap, no fresh page faults); only when the heap cannot serve a request is
// the cache returned to it and the request retried, and only then does
// allocation fail with torch.OutOfMemoryError.
#include <c10/core/CachingDeviceAllocator.h>

#include "runtime/allocator.h"
#include "runtime/capture.h"
#include "runtime/device.h"
#include "runtime/device_memory.h"
#include "runtime/fork_guard.h"
#include "runtime/observers.h"
#include "runtime/streams.h"
#include "runtime/undefined_memory.h"

#include <c10/util/Exception.h>
#include <c10/util/flat_hash_map.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace simhpu {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;

constexpr size_t kAll = static_cast<size_t>(StatType::AGGREGATE);

size_t round_up(size_t n) {
  constexpr size_t g = DeviceMemory::kGranularity;
  return n == 0 ? g : (n + g - 1) / g * g;
}

std::string format_bytes(size_t n) {
  std::ostringstream out;
  out.precision(2);
  out << std::fixed;
  if (n >= (size_t(1) << 30)) out << n / double(size_t(1) << 30) << " GiB";
  else if (n >= (size_t(1) << 20)) out << n / double(size_t(1) << 20) << " MiB";
  else if (n >= 1024) out << n / 1024.0 << " KiB";
  else out << n << " bytes";
  return out.str();
}

class DeviceCache {
 public:
  explicit DeviceCache(c10::DeviceIndex device) : device_(device) {}

  void* allocate(size_t requested) {
    const size_t size = round_up(requested);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (void* ptr = take_cached(size); ptr != nullptr) {
        return hand_out(ptr, size, requested);
      }
      if (void* ptr = new_block(size); ptr != nullptr) {
        return hand_out(ptr, size, requested);
      }
    }
    // Some memory may be held only by launch records: wait for the device's
    // streams and clear them (outside the lock: clearing frees blocks).
    drain_launches(device_);
    std::string out_of_memory;
    {
      std::lock_guard<std::mutex> lock(mu_);
      void* ptr = take_cached(size);
      if (ptr == nullptr) {
        stats_.num_alloc_retries++;
        release_cached();
        ptr = new_block(size);
      }
      if (ptr != nullptr) {
        return hand_out(ptr, size, requested);
      }
      stats_.num_ooms++;
      out_of_memory = "simhpu: out of memory on device " + std::to_string(device_) + ": tried to allocate " +
                      format_bytes(requested) + ", but only " + format_bytes(memory().free_bytes()) + " of " +
                      format_bytes(memory().capacity()) + " is free (" +
                      format_bytes(stats_.allocated_bytes[kAll].current) +
                      " held by tensors). Free some tensors, or raise SIMHPU_MEMORY_LIMIT." +
                      observers::context_notes();
    }
    observers::on_out_of_memory(device_, requested);  // outside the lock: an observer may take a snapshot
    TORCH_CHECK_WITH(OutOfMemoryError, false, out_of_memory);
  }

  std::vector<SegmentInfo> segments() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<SegmentInfo> out;
    for (const auto& [ptr, size] : block_sizes_) out.push_back({reinterpret_cast<uintptr_t>(ptr), size, true});
    for (const auto& [size, ptr] : cached_) out.push_back({reinterpret_cast<uintptr_t>(ptr), size, false});
    return out;
  }

  void free(void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = block_sizes_.find(ptr);
    TORCH_INTERNAL_ASSERT(it != block_sizes_.end(), "simhpu: freeing an unknown device block");
    const size_t size = it->second;
    block_sizes_.erase(it);
    observers::on_allocator_event(device_, "free_completed", ptr, size);
    cache_block(size, ptr);
    stats_.allocated_bytes[kAll].decrease(size);
    stats_.active_bytes[kAll].decrease(size);
    stats_.allocation[kAll].decrease(1);
    stats_.active[kAll].decrease(1);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    release_cached();
  }

  DeviceStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto* array : {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                        &stats_.requested_bytes, &stats_.allocation, &stats_.segment, &stats_.active}) {
      (*array)[kAll].reset_peak();
    }
  }

  void reset_accumulated() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto* array : {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                        &stats_.requested_bytes, &stats_.allocation, &stats_.segment, &stats_.active}) {
      (*array)[kAll].reset_accumulated();
    }
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
  }

  // Gives back its cached blocks; whether it then holds none (the lock is the caller's).
  bool release_all_if_unused() {
    release_cached();
    return block_sizes_.empty();
  }
  std::mutex& mutex() { return mu_; }

  std::pair<size_t, size_t> memory_info() {
    std::lock_guard<std::mutex> lock(mu_);
    return {memory().free_bytes(), memory().capacity()};
  }

 private:
  DeviceMemory& memory() { return device_memory(device_); }

  void* new_block(size_t size) {
    void* ptr = memory().allocate(size);
    if (ptr != nullptr) {
      stats_.reserved_bytes[kAll].increase(size);
      stats_.segment[kAll].increase(1);
      observers::on_allocator_event(device_, "segment_alloc", ptr, size);
    }
    return ptr;
  }

  void* hand_out(void* ptr, size_t size, size_t requested) {
    block_sizes_[ptr] = size;
    observers::on_allocator_event(device_, "alloc", ptr, size);
    stats_.allocated_bytes[kAll].increase(size);
    stats_.active_bytes[kAll].increase(size);
    stats_.requested_bytes[kAll].increase(requested);
    stats_.allocation[kAll].increase(1);
    stats_.active[kAll].increase(1);
    return ptr;
  }

  // Map nodes are recycled, so caching and taking blocks allocates no host memory.
  void cache_block(size_t size, void* ptr) {
    if (spare_nodes_.empty()) {
      cached_.emplace(size, ptr);
      return;
    }
    auto node = std::move(spare_nodes_.back());
    spare_nodes_.pop_back();
    node.key() = size;
    node.mapped() = ptr;
    cached_.insert(std::move(node));
  }

  // The smallest cached block that fits without wasting more than half of it.
  void* take_cached(size_t size) {
    auto it = cached_.lower_bound(size);
    if (it == cached_.end() || it->first > 2 * size) {
      return nullptr;
    }
    void* ptr = it->second;
    const size_t block = it->first;
    spare_nodes_.push_back(cached_.extract(it));
    if (block != size) {  // keep the accounting in block sizes
      stats_.reserved_bytes[kAll].decrease(block);
      stats_.reserved_bytes[kAll].increase(size);
      memory().release(static_cast<char*>(ptr) + size, block - size);
      observers::on_allocator_event(device_, "segment_free", static_cast<char*>(ptr) + size, block - size);
    }
    return ptr;
  }

  void release_cached() {
    for (const auto& [size, ptr] : cached_) {
      memory().release(ptr, size);
      observers::on_allocator_event(device_, "segment_free", ptr, size);
      stats_.reserved_bytes[kAll].decrease(size);
      stats_.segment[kAll].decrease(1);
    }
    cached_.clear();
  }

  c10::DeviceIndex device_;
  std::mutex mu_;
  using Cache = std::multimap<size_t, void*>;  // block size -> free block
  Cache cached_;
  std::vector<Cache::node_type> spare_nodes_;
  ska::flat_hash_map<void*, size_t> block_sizes_;  // blocks held by tensors
  DeviceStats stats_;
};

DeviceCache& cache_for(c10::DeviceIndex device) {
  // Never destroyed: storages may be freed while static destructors run.
  static std::array<DeviceCache*, 64> caches = [] {
    std::array<DeviceCache*, 64> all{};
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      all[d] = new DeviceCache(d);
    }
    return all;
  }();
  return *caches[device];
}

c10::DeviceIndex device_holding(const void* ptr) {
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    if (device_memory(d).contains(ptr)) return d;
  }
  TORCH_INTERNAL_ASSERT(false, "simhpu: freeing memory that belongs to no device");
}

// The block back to its device's cache.
void release_block(void* ptr) {
  forget_undefined(ptr);
  const observers::AllocatorCall call;
  cache_for(device_holding(ptr)).free(ptr);
}

// The deleter of device storages: the block is released now, or, while an
// observer (the sanitizer) keeps it for launches still pending, once they ran.
void free_block(void* ptr) {
  if (!observers::take_over_free(device_holding(ptr), ptr)) release_block(ptr);
}

class SimhpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    check_not_forked();
    const c10::DeviceIndex device = current_device();
    void* ptr = [&] {
      const observers::AllocatorCall call;
      return cache_for(device).allocate(nbytes);
    }();
    if (threads_capturing.load(std::memory_order_relaxed) != 0) {
      note_allocation_for_capture(ptr);
    }
    if (observers::watched()) {
      observers::on_allocate(current_stream(device), host_address(device, ptr), nbytes);
    }
    return {ptr, ptr, &free_block, device_of(device)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &free_block;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Storage clones copy on the host, as CUDA's cudaMemcpy does on the legacy
    // default stream, which waits for the device's work: the devices holding
    // the two blocks finish first.
    const c10::DeviceIndex to = device_holding(dest), from = device_holding(src);
    synchronize_device(to);
    if (from != to) synchronize_device(from);
    if (!observers::values_computed()) return;  // no values to copy (phantom execution)
    std::memcpy(host_pointer(dest), host_pointer(src), count);
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {
    const observers::AllocatorCall call;
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      cache_for(d).empty_cache();
    }
  }
  // Launch records keep storages alive until their kernels ran, so a block is
  // only freed (and reused) once every stream using it is past it; the
  // sanitizer checks frees as real hardware's allocator would reuse them.
  void recordStream(const c10::DataPtr& data, c10::Stream stream) override {
    if (data.get() != nullptr) {
      observers::on_record_stream(stream, host_address(stream.device_index(), data.get()));
    }
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device_index(device, "memory_stats");
    return cache_for(device).stats();
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_accumulated_memory_stats");
    cache_for(device).reset_accumulated();
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_peak_memory_stats");
    cache_for(device).reset_peak();
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device, "mem_get_info");
    return cache_for(device).memory_info();
  }

 private:
  static void* host_pointer(const void* device_ptr) {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      if (device_memory(d).contains(device_ptr)) {
        return device_memory(d).host_address(device_ptr);
      }
    }
    return const_cast<void*>(device_ptr);
  }
};

SimhpuAllocator the_allocator;

} // namespace

void release_device_block(void* device_ptr) {
  release_block(device_ptr);
}

bool set_device_capacity(size_t bytes) {
  if (bytes == memory_limit_bytes()) return true;
  synchronize_all_devices();  // (launch records may hold blocks)
  std::vector<std::unique_lock<std::mutex>> locks;
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) locks.emplace_back(cache_for(d).mutex());
  for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
    if (!cache_for(d).release_all_if_unused()) return false;
  }
  remake_unused_device_memories(bytes);
  return true;
}

std::vector<SegmentInfo> device_segments(c10::DeviceIndex device) {
  check_device_index(device, "memory snapshot");
  return cache_for(device).segments();
}

// Makes at::GetAllocator(kPrivateUse1), and so every device factory, use this allocator.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &the_allocator);

} // namespace simhpu
