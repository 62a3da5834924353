#pragma once
// The kernel trace, a lens: for each kernel, when it was queued, started and
// finished, on which device and stream, launched by which op and from where.
// Two readers use it, each for a span of time, possibly nested: torch.simhpu.trace(path)
// (a Chrome trace) and PyTorch's profiler (profiler/kineto_plugin.cpp).
//
// The runtime does not call it: it subscribes to the runtime's observers
// (runtime/observers.h), active while a reader records.
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <vector>

namespace simhpu {

struct TraceEntry {
  const char* kernel;
  const char* op;
  const char* file;  // may be null
  int line;
  c10::DeviceIndex device;
  c10::StreamId stream;
  int64_t queued_ns;  // trace_clock_ns() at launch
  int64_t start_ns;
  int64_t end_ns;
  uint64_t correlation;  // the profiler's id of the host op that launched it; 0: none
  bool by_host;  // run by a host thread waiting for the stream, not by the stream's worker
};

// Nanoseconds on a steady clock; unix_ns_of() converts its readings to the wall
// clock PyTorch's profiler stamps host events with.
int64_t trace_clock_ns();
int64_t unix_ns_of(int64_t trace_ns);

// A reader starts recording and gets a mark; stop_trace(mark) gives it every entry
// of a kernel launched since (finished kernels: it synchronises first). Recording
// stops, and the log is emptied, when the last reader stops.
struct TraceMark {
  uint64_t entry = 0;    // entries finish in any order: the first that may be the reader's
  int64_t since_ns = 0;  // and the reader's are those launched after this
};
TraceMark start_trace();
std::vector<TraceEntry> stop_trace(const TraceMark& mark);

// The host op a launch belongs to, set by the profiler around each op on the
// launching thread (a stack: ops nest).
void push_correlation(uint64_t id);
void pop_correlation();
uint64_t current_correlation();

} // namespace simhpu
