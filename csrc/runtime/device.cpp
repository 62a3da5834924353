#include "runtime/device.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

namespace simhpu {
namespace {

c10::DeviceIndex read_device_count() {
  const char* env = std::getenv("SIMHPU_DEVICE_COUNT");
  if (env == nullptr || *env == '\0') {
    return 2;
  }
  char* end = nullptr;
  long value = std::strtol(env, &end, 10);
  TORCH_CHECK(
      end != env && *end == '\0' && value >= 1 && value <= 64,
      "SIMHPU_DEVICE_COUNT must be a whole number from 1 to 64, got '", env, "'");
  return static_cast<c10::DeviceIndex>(value);
}

thread_local c10::DeviceIndex tls_current_device = 0;

} // namespace

c10::DeviceIndex device_count() {
  static const c10::DeviceIndex count = read_device_count();
  return count;
}

c10::DeviceIndex current_device() {
  return tls_current_device;
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index, "set_device");
  tls_current_device = index;
}

// RuntimeError, as CUDA's "invalid device ordinal" is.
void check_device_index(int64_t index, const char* who) {
  TORCH_CHECK(
      index >= 0 && index < device_count(),
      who, ": device index ", index, " is out of range; simhpu has ",
      static_cast<int>(device_count()), " device(s) (set SIMHPU_DEVICE_COUNT to change)");
}

} // namespace simhpu
