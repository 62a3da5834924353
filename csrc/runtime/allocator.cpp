#include "runtime/allocator.h"

#include "runtime/device.h"
#include "runtime/launch_queue.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace simhpu {
namespace {

// Every block starts with a header that records its size and device, so the
// deleter needs no lookup table. The header is one alignment unit, keeping the
// payload 64-byte aligned for vectorised kernels.
constexpr size_t kAlignment = 64;
struct BlockHeader {
  size_t nbytes;
  c10::DeviceIndex device;
};
static_assert(sizeof(BlockHeader) <= kAlignment);

constexpr size_t kMaxDevices = 64;

struct DeviceCounters {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> frees{0};
};
std::array<DeviceCounters, kMaxDevices> counters;

void note_allocation(c10::DeviceIndex device, int64_t nbytes) {
  auto& c = counters[device];
  int64_t now = c.allocated.fetch_add(nbytes) + nbytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.allocations.fetch_add(1);
}

void free_block(void* base) {
  auto* header = static_cast<BlockHeader*>(base);
  auto& c = counters[header->device];
  c.allocated.fetch_sub(static_cast<int64_t>(header->nbytes));
  c.frees.fetch_add(1);
  std::free(base);
}

class SimhpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = current_device();
    const c10::Device where = device_of(device);
    if (nbytes == 0) {
      return {nullptr, nullptr, &free_block, where};
    }
    const size_t total = kAlignment + ((nbytes + kAlignment - 1) / kAlignment) * kAlignment;
    void* base = std::aligned_alloc(kAlignment, total);
    TORCH_CHECK_WITH(
        OutOfMemoryError, base != nullptr,
        "simhpu: out of memory allocating ", nbytes, " bytes on device ",
        static_cast<int>(device));
    auto* header = static_cast<BlockHeader*>(base);
    header->nbytes = nbytes;
    header->device = device;
    note_allocation(device, static_cast<int64_t>(nbytes));
    return {static_cast<char*>(base) + kAlignment, base, &free_block, where};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr;  // data and context differ, so raw_allocate is unsupported
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Storage-level copies happen on the host, so pending kernels must finish.
    synchronize_all_devices();
    std::memcpy(dest, src, count);
  }

  bool initialized() override {
    return true;
  }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device_index(device, "memory_stats");
    const auto& c = counters[device];
    c10::CachingDeviceAllocator::DeviceStats stats;
    auto& bytes = stats.allocated_bytes[0];  // index 0 aggregates all pools
    bytes.current = c.allocated.load();
    bytes.peak = c.peak.load();
    bytes.allocated = c.allocations.load();
    bytes.freed = c.frees.load();
    stats.reserved_bytes[0] = bytes;
    stats.active_bytes[0] = bytes;
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_accumulated_memory_stats");
    counters[device].allocations = 0;
    counters[device].frees = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_peak_memory_stats");
    counters[device].peak = counters[device].allocated.load();
  }
};

SimhpuAllocator the_allocator;

} // namespace

c10::DeviceAllocator* device_allocator() {
  return &the_allocator;
}

size_t memory_allocated(c10::DeviceIndex device) {
  check_device_index(device, "memory_allocated");
  return static_cast<size_t>(counters[device].allocated.load());
}

size_t max_memory_allocated(c10::DeviceIndex device) {
  check_device_index(device, "max_memory_allocated");
  return static_cast<size_t>(counters[device].peak.load());
}

// Makes at::GetAllocator(kPrivateUse1), and so every device factory, use this allocator.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &the_allocator);

} // namespace simhpu
