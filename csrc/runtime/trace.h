#pragma once
// The runtime's own trace: for each kernel, when it was queued, started and
// finished, on which device and stream, launched by which op and from where.
// torch.simhpu.trace(path) turns it into a Chrome trace (chrome://tracing, Perfetto).
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <atomic>
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
  int64_t queued_ns;  // since the trace started
  int64_t start_ns;
  int64_t end_ns;
};

extern std::atomic<bool> tracing_enabled;
inline bool tracing() {
  return tracing_enabled.load(std::memory_order_relaxed);
}
int64_t trace_clock_ns();
void start_trace();
std::vector<TraceEntry> stop_trace();
void add_trace_entry(const TraceEntry& entry);

} // namespace simhpu
