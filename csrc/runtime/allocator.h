#pragma once
// Device memory for simhpu tensors: a caching allocator per device over the
// device's fixed-capacity memory (device_memory.h), registered as the
// PrivateUse1 allocator so every device factory allocates through it. Its
// statistics are what torch.simhpu.memory_* and torch.accelerator.memory_* report.
#include <c10/core/CachingDeviceAllocator.h>

namespace simhpu {

c10::DeviceAllocator* device_allocator();

} // namespace simhpu
