// DistributedDataParallel's timer for simhpu (its reducer asks the registry
// for one per device type, and warns without one): events on the current
// stream, so forward, backward and communication times are the device's.
#include "runtime/events.h"
#include "runtime/streams.h"

#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <array>
#include <optional>

namespace simhpu {
namespace {

class DeviceTimer final : public c10d::Timer {
 public:
  explicit DeviceTimer(c10::Device device) : device_(device) {}
  ~DeviceTimer() override {
    for (void* event : events_) {
      destroy_event(event);
    }
  }

  void record(Event event) override {
    c10d::Timer::record(event);  // the host's time too, which DDP also reports
    record_event(&events_[static_cast<size_t>(event)], current_stream(device_.index()));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    void* a = events_[static_cast<size_t>(start)];
    void* b = events_[static_cast<size_t>(end)];
    if (a == nullptr || b == nullptr) {
      return std::nullopt;
    }
    synchronize_event(a);
    synchronize_event(b);
    return static_cast<int64_t>(elapsed_ms(a, b) * 1e6);
  }

 private:
  c10::Device device_;
  std::array<void*, 5> events_{};  // one per Timer::Event
};

} // namespace
} // namespace simhpu

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, simhpu::DeviceTimer);
} // namespace c10d
