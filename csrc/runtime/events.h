#pragma once
// Events: points in a stream (behind torch.Event and torch.simhpu.Event).
// Recording one queues a marker; waiting on one holds a stream back until
// another stream has reached that marker.
#include <c10/core/Stream.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace simhpu {

// `recorded` counts the host's record() calls; `reached` is the latest of them
// a stream's worker executed. Queued records hold a reference, so destroying
// the event is always safe.
struct SimEvent : c10::intrusive_ptr_target {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;
  uint64_t reached = 0;
  std::chrono::steady_clock::time_point reached_at;

  void wait_for(uint64_t version) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reached >= version; });
  }
};

// The API c10's DeviceGuardImplInterface calls; `event` is the handle c10 keeps.
void record_event(void** event, const c10::Stream& stream);
void block_on_event(void* event, const c10::Stream& stream);
bool query_event(void* event);
void synchronize_event(void* event);
// The same, giving up after `timeout`: false if the event was not reached by then.
bool synchronize_event_for(void* event, std::chrono::milliseconds timeout);
double elapsed_ms(void* start, void* end);
void destroy_event(void* event);

} // namespace simhpu
