#include "trace/kernel_trace.h"

#include "runtime/launch_record.h"
#include "runtime/observers.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <mutex>

namespace simhpu {

namespace {

std::mutex mu;
// log[i] is entry number first_entry + i; marks are entry numbers, so a reader
// that started before entries were dropped still finds its own.
std::vector<TraceEntry>* log = new std::vector<TraceEntry>();
uint64_t first_entry = 0;
int readers = 0;

const std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();

thread_local std::vector<uint64_t> correlations;
thread_local int64_t kernel_started_ns = 0;  // a thread runs one record at a time

void add_trace_entry(const TraceEntry& entry) {
  std::lock_guard<std::mutex> lock(mu);
  log->push_back(entry);
}

// What the trace sees of the runtime: each record queued to run, and each
// kernel's run. (Records captured into a graph or a cluster are not queued.)
class TraceLens final : public RuntimeObserver {
 public:
  TraceLens() { observers::subscribe(this); }
  void on_queued(LaunchRecord& record, const c10::Stream& stream) override {
    record.queued_ns = trace_clock_ns();
    record.correlation = current_correlation();
  }
  void before_record_runs(const LaunchRecord& record) override {
    if (record.queued_ns >= 0) kernel_started_ns = trace_clock_ns();
  }
  void after_record_ran(const LaunchRecord& record, const c10::Stream& stream, bool by_host) override {
    if (record.queued_ns < 0 || record.kind != LaunchRecord::Kind::Kernel) return;
    add_trace_entry({record.kernel->name, record.op_name, record.site.file(), record.site.line(),
                     stream.device_index(), stream.id(), record.queued_ns, kernel_started_ns, trace_clock_ns(),
                     record.correlation, by_host});
  }
};

TraceLens& lens() {
  static TraceLens* instance = new TraceLens();  // never destroyed: kernels may run at exit
  return *instance;
}

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
  if (readers++ == 0) observers::set_active(&lens(), true);
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
    observers::set_active(&lens(), false);
    first_entry += log->size();
    log->clear();
  }
  return out;
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
