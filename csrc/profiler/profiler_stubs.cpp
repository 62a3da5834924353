// The device's answers to PyTorch's profiler stubs for PrivateUse1, used by the
// autograd profiler with use_device="simhpu": an op's device time is the time
// between two events recorded on the current stream around it.
#include "runtime/device.h"
#include "runtime/events.h"
#include "runtime/streams.h"

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

namespace simhpu {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct SimhpuProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device != nullptr) *device = index;
    void* handle = nullptr;
    record_event(&handle, current_stream(index));
    *event = ProfilerVoidEventStub(handle, [](void* e) { destroy_event(e); });
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
  }

  // Microseconds, as the CUDA stubs answer.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    synchronize_event(start->get());
    synchronize_event(end->get());
    return static_cast<float>(elapsed_ms(start->get(), end->get()) * 1000.0);
  }

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    const c10::DeviceIndex previous = current_device();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      set_device(d);
      op(d);
    }
    set_device(previous);
  }

  void synchronize() const override {
    synchronize_all_devices();
  }

  // No range markers: the device's kernels are named in the profiler's own trace.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
};

const bool registered = [] {
  static SimhpuProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

} // namespace
} // namespace simhpu
