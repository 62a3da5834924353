#include "runtime/trace.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <mutex>

namespace simhpu {

std::atomic<bool> tracing_enabled{false};

namespace {

std::mutex mu;
// log[i] is entry number first_entry + i; marks are entry numbers, so a reader
// that started before entries were dropped still finds its own.
std::vector<TraceEntry>* log = new std::vector<TraceEntry>();
uint64_t first_entry = 0;
int readers = 0;

const std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();

thread_local std::vector<uint64_t> correlations;

} // namespace

int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin).count();
}

int64_t unix_ns_of(int64_t trace_ns) {
  const int64_t now_unix = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
  return now_unix - (trace_clock_ns() - trace_ns);
}

TraceMark start_trace() {
  std::lock_guard<std::mutex> lock(mu);
  ++readers;
  tracing_enabled = true;
  return {first_entry + log->size(), trace_clock_ns()};
}

std::vector<TraceEntry> stop_trace(const TraceMark& mark) {
  std::lock_guard<std::mutex> lock(mu);
  const size_t from = mark.entry > first_entry ? static_cast<size_t>(mark.entry - first_entry) : 0;
  std::vector<TraceEntry> out;
  // (A kernel launched before the mark, in an enclosing reader's block, may finish after it.)
  std::copy_if(log->begin() + std::min(from, log->size()), log->end(), std::back_inserter(out),
               [&](const TraceEntry& e) { return e.queued_ns >= mark.since_ns; });
  if (readers > 0 && --readers == 0) {
    tracing_enabled = false;
    first_entry += log->size();
    log->clear();
  }
  return out;
}

void add_trace_entry(const TraceEntry& entry) {
  std::lock_guard<std::mutex> lock(mu);
  log->push_back(entry);
}

void push_correlation(uint64_t id) {
  correlations.push_back(id);
}

void pop_correlation() {
  if (!correlations.empty()) correlations.pop_back();
}

uint64_t current_correlation() {
  return correlations.empty() ? 0 : correlations.back();
}

} // namespace simhpu
