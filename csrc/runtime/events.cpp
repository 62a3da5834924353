#include "runtime/events.h"

#include "runtime/capture.h"
#include "runtime/launch_record.h"
#include "runtime/observers.h"
#include "runtime/streams.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <mutex>

namespace simhpu {

// The handle c10 keeps for an event owns one reference to it.
void record_event(void** event, const c10::Stream& stream) {
  if (*event == nullptr) {
    *event = c10::make_intrusive<SimEvent>().release();
  }
  auto* e = static_cast<SimEvent*>(*event);
  LaunchSlot slot(stream);
  LaunchRecord& record = slot.record();
  record.kind = LaunchRecord::Kind::RecordEvent;
  record.event = c10::intrusive_ptr<SimEvent>::reclaim_copy(e);
  {
    std::lock_guard<std::mutex> lock(e->mu);
    record.event_version = ++e->recorded;
  }
  slot.commit();
}

void block_on_event(void* event, const c10::Stream& stream) {
  auto* e = static_cast<SimEvent*>(event);
  if (e == nullptr) {
    return;  // never recorded: nothing to wait for
  }
  LaunchSlot slot(stream);
  LaunchRecord& record = slot.record();
  record.kind = LaunchRecord::Kind::WaitEvent;
  record.event = c10::intrusive_ptr<SimEvent>::reclaim_copy(e);
  {
    std::lock_guard<std::mutex> lock(e->mu);
    record.event_version = e->recorded;
  }
  slot.commit();
}

bool query_event(void* event) {
  auto* e = static_cast<SimEvent*>(event);
  if (e == nullptr) {
    return true;
  }
  std::lock_guard<std::mutex> lock(e->mu);
  return e->reached >= e->recorded;
}

void synchronize_event(void* event) {
  synchronize_event_for(event, std::chrono::milliseconds::max());
}

bool synchronize_event_for(void* event, std::chrono::milliseconds timeout) {
  auto* e = static_cast<SimEvent*>(event);
  if (e == nullptr) {
    return true;
  }
  before_host_wait(-1, "Event.synchronize");
  observers::on_host_wait_begins();
  bool reached;
  {
    std::unique_lock<std::mutex> lock(e->mu);
    const uint64_t version = e->recorded;
    if (timeout == std::chrono::milliseconds::max()) {
      e->cv.wait(lock, [&] { return e->reached >= version; });
      reached = true;
    } else {
      reached = e->cv.wait_for(lock, timeout, [&] { return e->reached >= version; });
    }
  }
  if (reached) observers::on_host_waited_for_event(e);
  return reached;
}

double elapsed_ms(void* start, void* end) {
  auto* a = static_cast<SimEvent*>(start);
  auto* b = static_cast<SimEvent*>(end);
  TORCH_CHECK(a != nullptr && b != nullptr, "elapsed_time: both events must have been recorded");
  TORCH_CHECK(query_event(a) && query_event(b),
              "elapsed_time: both events must have completed; call synchronize() on them first");
  if (a == b) {
    return 0.0;
  }
  if (const std::optional<double> seconds = observers::elapsed_seconds(a, b)) {
    return *seconds * 1e3;  // an observer keeps the modelled part's time
  }
  // Both locks at once, deadlock-free whichever order two threads pass the events in.
  std::scoped_lock lock(a->mu, b->mu);
  return std::chrono::duration<double, std::milli>(b->reached_at - a->reached_at).count();
}

void destroy_event(void* event) {
  if (event != nullptr) {
    observers::on_event_destroyed(event);
    c10::intrusive_ptr<SimEvent>::reclaim(static_cast<SimEvent*>(event));  // drops the handle's reference
  }
}

} // namespace simhpu
