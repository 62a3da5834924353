#pragma once
// The caching device allocator (allocator.cpp), as the rest of the library
// reaches it beyond at::GetAllocator: its segments, the devices' capacity, and
// blocks an observer kept after their storage died.
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace simhpu {

// The allocator's segments of a device: every block it holds, by tensors or cached.
struct SegmentInfo {
  uintptr_t address;
  size_t size;
  bool active;  // held by a tensor
};
std::vector<SegmentInfo> device_segments(c10::DeviceIndex device);

// Every device's capacity becomes `bytes` (its cached blocks given back), if no
// device holds a block; false otherwise.
bool set_device_capacity(size_t bytes);

// A device block an observer kept after its storage died (RuntimeObserver::take_over_free) goes back to its cache.
void release_device_block(void* device_ptr);

} // namespace simhpu
