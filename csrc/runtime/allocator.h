#pragma once
// Device memory for simhpu tensors. Registered as the PrivateUse1 allocator, so
// every storage created by the device's factories comes from here.
#include <c10/core/CachingDeviceAllocator.h>

namespace simhpu {

// The allocator object registered with c10 for PrivateUse1.
c10::DeviceAllocator* device_allocator();

// Bytes currently handed out on `device` (the figure behind memory_allocated()).
size_t memory_allocated(c10::DeviceIndex device);
size_t max_memory_allocated(c10::DeviceIndex device);

} // namespace simhpu
