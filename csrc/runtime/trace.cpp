#include "runtime/trace.h"

#include <chrono>
#include <mutex>

namespace simhpu {

std::atomic<bool> tracing_enabled{false};

namespace {

std::mutex mu;
std::vector<TraceEntry>* entries = new std::vector<TraceEntry>();
std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();

} // namespace

int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin).count();
}

void start_trace() {
  std::lock_guard<std::mutex> lock(mu);
  entries->clear();
  origin = std::chrono::steady_clock::now();
  tracing_enabled = true;
}

std::vector<TraceEntry> stop_trace() {
  std::lock_guard<std::mutex> lock(mu);
  tracing_enabled = false;
  std::vector<TraceEntry> out;
  out.swap(*entries);
  return out;
}

void add_trace_entry(const TraceEntry& entry) {
  std::lock_guard<std::mutex> lock(mu);
  entries->push_back(entry);
}

} // namespace simhpu
