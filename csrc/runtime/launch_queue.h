#pragma once
// The asynchronous launch path. Each device has a default stream and a small
// pool of further streams; each stream is an in-order queue drained by its own
// worker thread. Host code returns as soon as a launch is queued. Events are
// records in the queues too: recording one marks a point in a stream, waiting
// on one holds a stream back until another stream has reached that point.
#include "runtime/kernel_arg.h"
#include "runtime/launch_site.h"

#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace simhpu {

struct LaunchRecord;
using KernelFn = void (*)(KernelArgs& args);
using RecordKernelFn = void (*)(LaunchRecord& record);

class LaunchQueue;  // one stream's ring and worker (launch_queue.cpp)

// A device kernel as the runtime knows it: a name and an entry point. Kernels
// that need the whole record (its kept-alive storages, its payload) set
// run_record instead of run.
struct KernelDef {
  const char* name;
  KernelFn run;
  RecordKernelFn run_record = nullptr;
};

// A point in a stream (behind torch.Event). `recorded` counts the host's
// record() calls; `reached` is the latest of them a stream's worker executed.
// Queued records hold a reference, so destroying the event is always safe.
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

// One slot of a stream's ring. A producer fills it in place and the worker
// runs it there: launching allocates nothing once a slot's small vectors have
// grown to fit. For a kernel, `keep_alive` holds the storages of every tensor
// argument so their memory cannot be freed, or reused, before it ran; the
// launching side clears finished slots (see LaunchQueue in launch_queue.cpp).
struct alignas(64) LaunchRecord {
  enum class Kind : uint8_t { Kernel, RecordEvent, WaitEvent };
  // What every launch reads and writes comes first, on as few cache lines as
  // possible: a slot moves between the launching core and the worker's.
  Kind kind = Kind::Kernel;
  const KernelDef* kernel = nullptr;
  const char* op_name = "";
  int64_t queued_ns = -1;  // set while tracing (see trace.h)
  c10::SmallVector<c10::Storage, 4> keep_alive;
  LaunchSite site;  // where Python launched it, for error messages
  c10::intrusive_ptr<SimEvent> event;  // RecordEvent / WaitEvent
  uint64_t event_version = 0;
  const void* payload = nullptr;  // for run_record kernels: what to run (read-only, outlives the record)
  // Bit i: the kernel writes keep_alive[i] (from the 64th on, all are assumed
  // written). None set: the launch did not say, so it may write all it holds.
  uint64_t written_storages = 0;
  KernelArgs args;

  // Declares that the kernel writes keep_alive[slot] (a negative slot: no storage, nothing to mark).
  void mark_written(int64_t slot) {
    if (slot >= 0) {
      written_storages |= slot < 64 ? uint64_t(1) << slot : ~uint64_t(0);
    }
  }
  bool may_write(size_t slot) const {
    return written_storages == 0 || slot >= 64 || ((written_storages >> slot) & 1) != 0;
  }

  // Back to an empty kernel record, keeping the vectors' capacity.
  void clear();
  // True while the slot keeps storages or an event alive.
  bool holds_references() const { return !keep_alive.empty() || event; }
};

// How many records a stream's ring holds before a producer waits for room:
// about as deep as CUDA's own launch queue (a slot is about 1 KiB).
constexpr size_t kQueueCapacity = 1024;

// The default stream and this many pooled streams per device.
constexpr int kPooledStreams = 4;

// True in a child forked after the runtime started: its worker threads did not
// survive fork(), so device work there raises a clear error instead of hanging.
bool in_bad_fork();
void check_not_forked();

// True when SIMHPU_LAUNCH_BLOCKING=1: kernels run inside the launching call.
bool launch_blocking();

// The calling thread's current stream on `device` (the default stream until set).
c10::Stream current_stream(c10::DeviceIndex device);
void set_current_stream(const c10::Stream& stream);
c10::Stream default_stream(c10::DeviceIndex device);
// A stream from the device's pool, handed out round-robin (as CUDA does).
c10::Stream pooled_stream(c10::DeviceIndex device);

// A claimed slot on a stream's queue: fill record(), then commit() to hand it
// to the stream's worker (in SIMHPU_LAUNCH_BLOCKING=1 mode commit() runs it at
// once and raises its failure). Producers on one stream take turns, so keep the
// time between claiming and committing short. Dropped uncommitted (an exception
// while filling), the slot is cleared and nothing runs.
class LaunchSlot {
 public:
  explicit LaunchSlot(const c10::Stream& stream);
  explicit LaunchSlot(c10::DeviceIndex device) : LaunchSlot(current_stream(device)) {}
  ~LaunchSlot();
  LaunchSlot(const LaunchSlot&) = delete;
  LaunchSlot& operator=(const LaunchSlot&) = delete;

  LaunchRecord& record() { return *record_; }
  void commit();

 private:
  LaunchQueue* queue_ = nullptr;  // null in blocking mode
  LaunchRecord* record_ = nullptr;
  bool committed_ = false;
};

// Waits for every stream of `device` and clears their finished slots, freeing
// the memory launches kept alive (the allocator's last resort before it
// reports out of memory). Kernel failures stay for the next synchronising call.
void drain_launches(c10::DeviceIndex device);

// Wait until the stream (device: every stream) has run all queued work, then
// raise the first kernel failure it saw.
void synchronize_stream(const c10::Stream& stream);
void synchronize_device(c10::DeviceIndex device);
void synchronize_all_devices();
// True if the stream has no queued or running work.
bool query_stream(const c10::Stream& stream);

// Events, behind c10's DeviceGuardImplInterface (torch.Event and torch.simhpu.Event).
void record_event(void** event, const c10::Stream& stream);
void block_on_event(void* event, const c10::Stream& stream);
bool query_event(void* event);
void synchronize_event(void* event);
double elapsed_ms(void* start, void* end);
void destroy_event(void* event);

} // namespace simhpu
