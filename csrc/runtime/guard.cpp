// The device guard PyTorch uses to switch devices around an operator call
// (c10::DeviceGuard, torch.simhpu.device(...)). One stream per device until
// streams arrive; its id is 0.
#include "runtime/device.h"
#include "runtime/launch_queue.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace simhpu {
namespace {

constexpr auto kDeviceType = c10::DeviceType::PrivateUse1;

struct SimhpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kDeviceType;
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kDeviceType);
    c10::Device previous = getDevice();
    if (d.index() != previous.index()) {
      set_device(d.index());
    }
    return previous;
  }

  c10::Device getDevice() const override {
    return device_of(current_device());
  }

  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kDeviceType);
    set_device(d.index());
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) {
      set_device(d.index());
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  void synchronizeStream(const c10::Stream& s) const override {
    synchronize_device(s.device_index());
  }

  void synchronizeDevice(const c10::DeviceIndex index) const override {
    synchronize_device(index);
  }

  bool queryStream(const c10::Stream&) const override {
    return true;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimhpuGuardImpl);

} // namespace
} // namespace simhpu
