// The device guard PyTorch uses to switch devices and streams around an
// operator call (c10::DeviceGuard, torch.Stream, torch.Event, torch.accelerator).
#include "runtime/device.h"
#include "runtime/events.h"
#include "runtime/streams.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace simhpu {
namespace {

constexpr auto kDeviceType = c10::DeviceType::PrivateUse1;

// A device given without an index ("simhpu") means the current one.
c10::DeviceIndex index_of(c10::Device d) {
  return d.has_index() ? d.index() : current_device();
}

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
    return current_stream(index_of(d));
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return default_stream(index_of(d));
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return pooled_stream(index_of(d));
  }

  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return pooled_stream(index_of(d));
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    c10::Stream previous = current_stream(s.device_index());
    set_current_stream(s);
    return previous;
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex, const c10::EventFlag) const override {
    record_event(event, stream);
  }

  void block(void* event, const c10::Stream& stream) const override {
    block_on_event(event, stream);
  }

  bool queryEvent(void* event) const override {
    return query_event(event);
  }

  void synchronizeEvent(void* event) const override {
    synchronize_event(event);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    return elapsed_ms(start, end);
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    destroy_event(event);
  }

  void synchronizeStream(const c10::Stream& s) const override {
    synchronize_stream(s);
  }

  bool queryStream(const c10::Stream& s) const override {
    return query_stream(s);
  }

  void synchronizeDevice(const c10::DeviceIndex index) const override {
    synchronize_device(index);
  }

  // Every dtype the CPU has, but quantized ones: quantized tensors do not exist
  // on the device (their operators are refused at the call, naming them).
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability capability;
    auto& types = capability.capability_data.supported_scalar_types;
    types.has_QInt8 = types.has_QUInt8 = types.has_QInt32 = types.has_QUInt4x2 = types.has_QUInt2x4 = 0;
    return capability;
  }

  // Nothing to do: a launch record keeps every storage it uses alive until the
  // kernel has run, so memory used on another stream is never freed (and so
  // never reused) before that stream is past it.
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimhpuGuardImpl);

} // namespace
} // namespace simhpu
