#pragma once
// The stream sanitizer (SIMHPU_SANITIZER=1, torch.simhpu.sanitizer): finds a
// launch on one stream that touches memory another stream used, when nothing
// orders the two — what real hardware turns into stale reads and lost writes,
// depending on timing.
//
// It works at launch time, on the launching thread and in launch order, so what
// it finds does not depend on how the workers happen to run. Each stream and the
// host keep a vector clock; event records and waits (wait_stream, wait_event, a
// collective's work.wait()) and the host's synchronisations with streams, events
// and devices carry clocks from one to another. Each launch's tensors (their byte
// spans in device memory, read or written as the launch declares) are checked
// against the accesses recorded on their memory since it was allocated.
//
// The runtime tells it about launches (LaunchSlot::commit), host waits and
// allocations; nothing else of the runtime knows it. Off, each hook is one
// relaxed atomic load.
#include "runtime/launch_record.h"

#include <c10/core/Stream.h>

#include <atomic>
#include <string>
#include <vector>

namespace simhpu::sanitizer {

enum class Mode : int { Off = 0, Raise = 1, Record = 2 };

namespace detail {
extern std::atomic<int> mode;
} // namespace detail

inline bool enabled() {
  return detail::mode.load(std::memory_order_relaxed) != static_cast<int>(Mode::Off);
}

// Raise: a race raises at the launching call (the launch does not happen).
// Record: races are kept for reports(), and the launch goes ahead.
// Turning it on starts from a clean history: what ran before is assumed ordered.
void set_mode(Mode mode);
Mode mode();

// The launch path: `record` is about to be queued on `stream` (raises in Raise mode).
void on_launch(const LaunchRecord& record, const c10::Stream& stream);

// The host has waited for everything queued so far on the stream / the device /
// up to the event's last record.
void on_host_waited_for_stream(const c10::Stream& stream);
void on_host_waited_for_device(c10::DeviceIndex device);
void on_host_waited_for_event(const void* event);

// The host reads (or writes) device memory itself: a copy to or from the CPU.
void on_host_access(const DeviceTensor& tensor, c10::DeviceIndex device, bool write, const char* op);

// A block handed out by the allocator: its earlier history no longer applies.
void on_allocate(c10::DeviceIndex device, const void* host_address, size_t bytes);

// What Record mode found, oldest first; and forgetting it.
std::vector<std::string> reports();
void clear_reports();

} // namespace simhpu::sanitizer
