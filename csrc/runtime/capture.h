#pragma once
// Launches collected instead of queued. While a thread captures a stream, the
// records it launches on that stream are appended to a LaunchSequence; the
// sequence later runs on the stream's worker as ONE queued record.
//
// Two kinds of capture share this:
// - a graph (torch.simhpu.Graph): the sequence is kept and replayed any number
//   of times; the host may not wait for the stream while capturing, since the
//   captured work has not run;
// - a cluster (each call of a torch.compile'd graph): the sequence is launched
//   when the call ends; a host wait in between first launches what was
//   collected so far, so the cluster splits there and nothing deadlocks.
//
// Captures belong to the thread that began them (CUDA's "thread-local" capture
// mode): other threads' launches are queued as usual.
#include "runtime/launch_record.h"

#include <ATen/core/Generator.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <deque>
#include <memory>
#include <vector>

namespace simhpu {

// Records in launch order. A deque, so a record being filled stays where it is
// while others are appended. Holding the records holds the storages they keep
// alive: memory a captured kernel touches is not reused while the sequence lives.
// A random launch captured into a graph. Its kernel draws from `kernel_engine`
// (a CPU generator), which each replay seeds afresh from `device_generator`,
// in capture order: as a CUDA graph's Philox offset moves at every replay, a
// replay draws new numbers and moves the device generator on.
struct CapturedRandomDraw {
  at::Generator device_generator;
  at::Generator kernel_engine;
  uint64_t numbers;
};

struct LaunchSequence {
  std::deque<LaunchRecord> records;
  std::vector<CapturedRandomDraw> random_draws;
  // A graph's own memory: blocks allocated while it was captured that its records
  // use. Each replay produces them anew, so a replay starts by forgetting what an
  // earlier replay's failure left undefined there (the user's tensors stay marked).
  std::vector<const void*> owned_blocks;
  size_t kernel_count() const;
};

enum class CaptureKind { Graph, Cluster };

// How many threads are capturing now: while none is, a launch skips the
// thread-local look-up (it is on every launch's path).
extern std::atomic<int> threads_capturing;

LaunchRecord* captured_record_for_this_thread(const c10::Stream& stream);

// The record the current thread should fill for a launch on `stream` while it
// captures that stream, or null (launch to the queue as usual). Raises when a
// graph capture sees a launch on another stream.
inline LaunchRecord* captured_record_for(const c10::Stream& stream) {
  if (threads_capturing.load(std::memory_order_relaxed) == 0) {
    return nullptr;
  }
  return captured_record_for_this_thread(stream);
}
// Drops the last record handed out by captured_record_for (its launch failed while filling it).
void drop_captured_record();

// Called before the host waits for `stream` (device -1: any stream): a cluster
// being collected on this thread is launched first; a graph capture raises.
void before_host_wait(c10::DeviceIndex device, const char* what);

// Launches `sequence` on `stream` as one record that runs its records in order
// ("graph_replay" or "cluster" in traces and messages). A replay made while
// this thread captures the stream is itself captured (it runs nested).
void launch_sequence(const c10::Stream& stream, std::shared_ptr<const LaunchSequence> sequence, CaptureKind kind);

// The sequence a queued record replays (a graph's), or null.
const LaunchSequence* graph_replayed_by(const LaunchRecord& record);
// Whether `record` launches a compiled graph's cluster (its launches were made, one by one, as it was collected).
bool cluster_launched_by(const LaunchRecord& record);

// Called by the allocator for each block it hands out while threads capture.
void note_allocation_for_capture(const void* block);

// Capturing a graph: begin on the current stream of the current device, end returns the sequence.
void begin_graph_capture();
std::shared_ptr<const LaunchSequence> end_graph_capture();
bool capturing_graph();
// Adds a random launch to this thread's graph capture; false when it captures no graph.
bool capture_random_draw(CapturedRandomDraw draw);

// One call of a compiled graph on `device`: launches on its current stream
// between begin and end go to the queue as one record (none: nothing is
// launched). Returns false, and collects nothing, inside a graph capture or
// another cluster (the launches join those) and in SIMHPU_LAUNCH_BLOCKING=1
// mode; end_cluster is only called after a begin_cluster that returned true.
bool begin_cluster(c10::DeviceIndex device);
void end_cluster();

} // namespace simhpu
