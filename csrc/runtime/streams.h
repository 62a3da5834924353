#pragma once
// Streams: each device has a default stream and a small pool of further
// streams; each stream is an in-order queue drained by its own worker thread.
// Host code returns as soon as a launch is queued.
#include "runtime/launch_record.h"

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

namespace simhpu {

class LaunchQueue;  // one stream's ring and worker (launch_queue.h)

// The default stream and this many pooled streams per device.
constexpr int kPooledStreams = 4;
// Communication streams a device has: each process group takes one (by the
// order groups are made, wrapping), as each NCCL communicator has its own
// stream, so one group's collectives do not queue behind another's.
constexpr int kCommunicationStreams = 8;

// True when SIMHPU_LAUNCH_BLOCKING=1: kernels run inside the launching call.
bool launch_blocking();

// The calling thread's current stream on `device` (the default stream until set).
c10::Stream current_stream(c10::DeviceIndex device);
void set_current_stream(const c10::Stream& stream);
c10::Stream default_stream(c10::DeviceIndex device);
// A stream from the device's pool, handed out round-robin (as CUDA does).
c10::Stream pooled_stream(c10::DeviceIndex device);
// The streams collectives run on (csrc/distributed), `channel` modulo
// kCommunicationStreams: never handed out by the pool, so a collective waiting
// for its peers holds back no one's kernels.
c10::Stream communication_stream(c10::DeviceIndex device, int channel = 0);

// A claimed slot on a stream's queue: fill record(), then commit() to hand it
// to the stream's worker (in SIMHPU_LAUNCH_BLOCKING=1 mode commit() runs it at
// once and raises its failure). Producers on one stream take turns, so keep the
// time between claiming and committing short. Dropped uncommitted (an exception
// while filling), the slot is cleared and nothing runs.
//
// While this thread captures the stream (a graph, or a compiled graph's
// cluster: runtime/capture.h) the slot is a record of the capture instead.
class LaunchSlot {
 public:
  explicit LaunchSlot(const c10::Stream& stream);
  // Straight to the stream's queue, even while it is being captured (how a capture itself is launched).
  enum BypassCapture { kBypassCapture };
  LaunchSlot(const c10::Stream& stream, BypassCapture);
  explicit LaunchSlot(c10::DeviceIndex device) : LaunchSlot(current_stream(device)) {}
  ~LaunchSlot();
  LaunchSlot(const LaunchSlot&) = delete;
  LaunchSlot& operator=(const LaunchSlot&) = delete;

  LaunchRecord& record() { return *record_; }
  void commit();

 private:
  void claim_from_queue(const c10::Stream& stream);

  LaunchQueue* queue_ = nullptr;  // null in blocking mode and while captured
  LaunchRecord* record_ = nullptr;
  c10::Stream stream_;
  bool captured_ = false;
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

// How many times the host has waited for every stream of a device (a device
// synchronisation, or the allocator draining the device before it reports out
// of memory) since the process started. CUDA programs make these rarely; a
// runtime that made them behind the program's back would hide races and stall.
uint64_t device_wide_waits();
void synchronize_all_devices();
// True if the stream has no queued or running work.
bool query_stream(const c10::Stream& stream);

// Keeps `memory` alive until every stream of its device has run what was queued
// on it so far, without waiting: a marker on each busy stream holds it. For
// memory that queued launches use by address while nothing of theirs holds it
// (a storage resized in place). Returns at once; idle streams need no marker.
void hold_until_streams_pass(c10::DeviceIndex device, const c10::Storage& memory);

} // namespace simhpu
