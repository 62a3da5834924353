#pragma once
// One simulated device's memory: a fixed capacity (SIMHPU_MEMORY_LIMIT) handed
// out cudaMalloc-style from an address range several times as large, as a
// GPU's virtual address space is larger than its memory: an allocation fails
// when the capacity is used up, not because the free bytes are scattered. Tensors hold addresses of the region's *device
// view*; kernels and copies reach the bytes through its *host view*. In strict
// mode (SIMHPU_STRICT=1) the two are separate mappings of the same pages and
// the device view is inaccessible, so host code that dereferences a device
// pointer faults, as it would on real hardware.
#include <c10/core/Device.h>

#include <cstddef>

namespace simhpu {

class DeviceMemory {
 public:
  DeviceMemory(c10::DeviceIndex device, size_t capacity, bool strict);
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // A device address of `nbytes` (a multiple of kGranularity), or nullptr when
  // no free range is large enough. Not thread-safe: the caller serialises.
  void* allocate(size_t nbytes);
  // Return a range to the region; its physical pages are released.
  void release(void* device_ptr, size_t nbytes);

  // Where host code (kernels, copies) reaches the byte at `device_ptr`.
  void* host_address(const void* device_ptr) const {
    return static_cast<char*>(host_base_) + (static_cast<const char*>(device_ptr) - device_base_);
  }
  bool contains(const void* p) const {
    return p >= device_base_ && p < device_base_ + span_;
  }
  size_t capacity() const { return capacity_; }
  // Bytes not handed out.
  size_t free_bytes() const { return free_bytes_; }

  static constexpr size_t kGranularity = 512;

 private:
  c10::DeviceIndex device_;
  size_t capacity_;
  size_t span_;  // of the address range, >= capacity_
  size_t free_bytes_;
  char* device_base_ = nullptr;
  void* host_base_ = nullptr;
  int fd_ = -1;
  struct FreeRanges;
  FreeRanges* free_ranges_;
};

// Strict mode and capacity, from the environment (read once).
bool strict_mode();
size_t memory_limit_bytes();
// Gives every device new memory of `bytes` (the allocator's set_device_capacity
// calls it once no device holds a block).
void remake_unused_device_memories(size_t bytes);

// The memory of device `index`, created on first use.
DeviceMemory& device_memory(c10::DeviceIndex index);

// The device whose memory holds `ptr`, or -1 if none does.
c10::DeviceIndex device_owning(const void* ptr);

// Host address of device memory `ptr` on `index` (identity outside strict mode).
inline void* host_address(c10::DeviceIndex index, const void* ptr) {
  return strict_mode() ? device_memory(index).host_address(ptr) : const_cast<void*>(ptr);
}

} // namespace simhpu
