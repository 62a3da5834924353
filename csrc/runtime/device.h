#pragma once
// Device enumeration and the calling thread's current device.
#include <c10/core/Device.h>

namespace simhpu {

// Number of simulated devices, read once from SIMHPU_DEVICE_COUNT (default 2).
c10::DeviceIndex device_count();

// The calling thread's current device (like cudaGetDevice); 0 until set.
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);

// Throws an IndexError naming `who` when `index` is not a valid device. Takes
// the index before it is narrowed to c10::DeviceIndex (an int8: 257 would wrap to 1).
void check_device_index(int64_t index, const char* who);

inline c10::Device device_of(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::PrivateUse1, index);
}

} // namespace simhpu
