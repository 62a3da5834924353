// What ATen asks of a PrivateUse1 backend outside operator dispatch:
// availability, device count and current device (torch.accelerator uses these).
#include "aten/resize.h"
#include "runtime/device.h"
#include "runtime/device_memory.h"
#include "runtime/generator.h"
#include "runtime/pinned_memory.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace simhpu {
namespace {

struct SimhpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex previous = current_device();
    set_device(d);
    return previous;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override {
    return default_generator(d < 0 ? current_device() : d);
  }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override {
    return new_generator(d < 0 ? current_device() : d);
  }

  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }

  // The device that owns the memory, whichever is current (from_blob on a
  // device pointer without a device= relies on this).
  at::Device getDeviceFromPtr(void* ptr) const override {
    const c10::DeviceIndex owner = device_owning(ptr);
    TORCH_CHECK(owner >= 0, "simhpu: ", ptr, " is not in the memory of any simhpu device");
    return device_of(owner);
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    resize_storage_bytes(storage, new_bytes);
  }
};

SimhpuHooks the_hooks;

} // namespace

void register_hooks() {
  at::RegisterPrivateUse1HooksInterface(&the_hooks);
}

} // namespace simhpu
