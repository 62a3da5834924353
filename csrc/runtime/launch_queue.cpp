#include "runtime/launch_queue.h"

#include "runtime/device.h"
#include "runtime/trace.h"

#include <c10/util/Exception.h>

#include <pthread.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace simhpu {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kStreamsPerDevice = 1 + kPooledStreams;

std::string describe_failure(const LaunchRecord& record, const char* what) {
  std::string where;
  if (record.site.file != nullptr) {
    where = std::string(" at ") + record.site.file + ":" + std::to_string(record.site.line);
  }
  return std::string("simhpu kernel '") + record.kernel->name + "' launched by " + record.op_name + where +
      " failed: " + what;
}

// Runs one record; a kernel's exception becomes a message.
std::optional<std::string> run_record(LaunchRecord& record, bool poisoned) {
  switch (record.kind) {
    case LaunchRecord::Kind::RecordEvent: {
      std::lock_guard<std::mutex> lock(record.event->mu);
      record.event->reached = std::max(record.event->reached, record.event_version);
      record.event->reached_at = Clock::now();
      record.event->cv.notify_all();
      return std::nullopt;
    }
    case LaunchRecord::Kind::WaitEvent:
      record.event->wait_for(record.event_version);
      return std::nullopt;
    case LaunchRecord::Kind::Kernel:
      break;
  }
  // After a failure the stream is poisoned: later kernels may depend on the
  // failed one's output, so they are dropped until the error is reported.
  // Event records still run, so no other stream waits forever.
  if (poisoned) {
    return std::nullopt;
  }
  try {
    record.kernel->run(record.args);
    return std::nullopt;
  } catch (const c10::Error& e) {
    return describe_failure(record, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return describe_failure(record, e.what());
  }
}

std::atomic<bool> forked_child{false};

void mark_forked_child() {
  forked_child = true;
}

// Called when the first worker starts: from then on a fork() cannot carry the runtime.
void watch_for_fork() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, &mark_forked_child);
    return true;
  }();
  (void)registered;
}

class LaunchQueue {
 public:
  explicit LaunchQueue(c10::Stream stream) : stream_(stream) {}

  void push(LaunchRecord&& record) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!worker_.joinable()) {
        watch_for_fork();
        worker_ = std::thread([this] { work(); });
      }
      if (pending_.size() >= kQueueCapacity) {
        lock.unlock();
        {
          GilRelease no_gil;
          std::unique_lock<std::mutex> wait_lock(mu_);
          room_.wait(wait_lock, [this] { return pending_.size() < kQueueCapacity; });
        }
        lock.lock();
      }
      pending_.push_back(std::move(record));
    }
    work_ready_.notify_one();
  }

  void synchronize() {
    // Wait without the GIL (released after, and re-taken before, the queue's
    // mutex): other Python threads may be producing the work this waits for.
    GilRelease no_gil;
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return pending_.empty() && !busy_; });
    if (failure_) {
      std::string message = std::move(*failure_);
      failure_.reset();
      lock.unlock();
      TORCH_CHECK(false, message);
    }
  }

  bool idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_.empty() && !busy_;
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_ready_.wait(lock, [this] { return !pending_.empty(); });
      LaunchRecord record = std::move(pending_.front());
      pending_.pop_front();
      busy_ = true;
      if (pending_.size() == kQueueCapacity - 1) {
        room_.notify_all();
      }
      const bool poisoned = failure_.has_value();
      lock.unlock();
      const int64_t start_ns = record.queued_ns >= 0 ? trace_clock_ns() : 0;
      std::optional<std::string> error = run_record(record, poisoned);
      if (record.queued_ns >= 0 && record.kind == LaunchRecord::Kind::Kernel) {
        add_trace_entry({record.kernel->name, record.op_name, record.site.file, record.site.line,
                         stream_.device_index(), stream_.id(), record.queued_ns, start_ns, trace_clock_ns()});
      }
      record = LaunchRecord();  // release storages outside the lock
      lock.lock();
      if (error && !failure_) {
        failure_ = std::move(error);
      }
      busy_ = false;
      if (pending_.empty()) {
        idle_.notify_all();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::condition_variable room_;
  std::deque<LaunchRecord> pending_;
  bool busy_ = false;
  std::optional<std::string> failure_;
  std::thread worker_;
  const c10::Stream stream_;
};

// Queues live for the whole process: workers may still be draining while
// static destructors run, so they are deliberately never destroyed.
struct DeviceStreams {
  c10::DeviceIndex device = 0;
  std::array<std::atomic<LaunchQueue*>, kStreamsPerDevice> queues{};
  std::atomic<uint32_t> next_pooled{0};
  std::mutex create_mu;

  LaunchQueue& queue(c10::StreamId id) {
    LaunchQueue* q = queues[id].load(std::memory_order_acquire);
    if (q == nullptr) {
      std::lock_guard<std::mutex> lock(create_mu);
      q = queues[id].load();
      if (q == nullptr) {
        q = new LaunchQueue(c10::Stream(c10::Stream::UNSAFE, device_of(device), id));
        queues[id].store(q, std::memory_order_release);
      }
    }
    return *q;
  }
};

DeviceStreams& streams_of(c10::DeviceIndex device) {
  static std::array<DeviceStreams, 64>* all = [] {
    auto* streams = new std::array<DeviceStreams, 64>();
    for (size_t d = 0; d < streams->size(); ++d) {
      (*streams)[d].device = static_cast<c10::DeviceIndex>(d);
    }
    return streams;
  }();
  return (*all)[device];
}

thread_local std::array<c10::StreamId, 64> tls_current_stream{};

c10::StreamId checked_id(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "expected a simhpu stream, got ", stream);
  check_device_index(stream.device_index(), "stream");
  TORCH_CHECK(stream.id() >= 0 && stream.id() < kStreamsPerDevice, "unknown simhpu stream id ", stream.id());
  return stream.id();
}

LaunchQueue& queue_of(const c10::Stream& stream) {
  return streams_of(stream.device_index()).queue(checked_id(stream));
}

bool read_launch_blocking() {
  const char* env = std::getenv("SIMHPU_LAUNCH_BLOCKING");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

void enqueue(const c10::Stream& stream, LaunchRecord&& record) {
  check_not_forked();
  if (tracing()) {
    record.queued_ns = trace_clock_ns();
  }
  if (launch_blocking()) {
    std::optional<std::string> error = run_record(record, false);
    TORCH_CHECK(!error, *error);
    return;
  }
  queue_of(stream).push(std::move(record));
}

} // namespace

bool launch_blocking() {
  static const bool blocking = read_launch_blocking();
  return blocking;
}

bool in_bad_fork() {
  return forked_child.load(std::memory_order_relaxed);
}

void check_not_forked() {
  TORCH_CHECK(!in_bad_fork(),
              "simhpu: the device cannot be used in a process forked after the simhpu runtime started "
              "(its worker threads do not survive fork()); start subprocesses with multiprocessing's "
              "'spawn' method instead");
}

c10::Stream current_stream(c10::DeviceIndex device) {
  return c10::Stream(c10::Stream::UNSAFE, device_of(device), tls_current_stream[device]);
}

void set_current_stream(const c10::Stream& stream) {
  tls_current_stream[stream.device_index()] = checked_id(stream);
}

c10::Stream default_stream(c10::DeviceIndex device) {
  return c10::Stream(c10::Stream::UNSAFE, device_of(device), 0);
}

c10::Stream pooled_stream(c10::DeviceIndex device) {
  check_device_index(device, "Stream");
  const uint32_t n = streams_of(device).next_pooled.fetch_add(1);
  return c10::Stream(c10::Stream::UNSAFE, device_of(device), 1 + static_cast<c10::StreamId>(n % kPooledStreams));
}

void submit(c10::DeviceIndex device, LaunchRecord&& record) {
  enqueue(current_stream(device), std::move(record));
}

void synchronize_stream(const c10::Stream& stream) {
  check_not_forked();
  queue_of(stream).synchronize();
}

bool query_stream(const c10::Stream& stream) {
  return queue_of(stream).idle();
}

void synchronize_device(c10::DeviceIndex device) {
  check_device_index(device, "synchronize");
  check_not_forked();
  auto& streams = streams_of(device);
  for (auto& q : streams.queues) {
    if (LaunchQueue* queue = q.load()) {
      queue->synchronize();
    }
  }
}

void synchronize_all_devices() {
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    synchronize_device(i);
  }
}

// The handle c10 keeps for an event owns one reference to it.
void record_event(void** event, const c10::Stream& stream) {
  if (*event == nullptr) {
    *event = c10::make_intrusive<SimEvent>().release();
  }
  auto* e = static_cast<SimEvent*>(*event);
  LaunchRecord record;
  record.kind = LaunchRecord::Kind::RecordEvent;
  record.event = c10::intrusive_ptr<SimEvent>::reclaim_copy(e);
  {
    std::lock_guard<std::mutex> lock(e->mu);
    record.event_version = ++e->recorded;
  }
  enqueue(stream, std::move(record));
}

void block_on_event(void* event, const c10::Stream& stream) {
  auto* e = static_cast<SimEvent*>(event);
  if (e == nullptr) {
    return;  // never recorded: nothing to wait for
  }
  LaunchRecord record;
  record.kind = LaunchRecord::Kind::WaitEvent;
  record.event = c10::intrusive_ptr<SimEvent>::reclaim_copy(e);
  {
    std::lock_guard<std::mutex> lock(e->mu);
    record.event_version = e->recorded;
  }
  enqueue(stream, std::move(record));
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
  auto* e = static_cast<SimEvent*>(event);
  if (e == nullptr) {
    return;
  }
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    version = e->recorded;
  }
  e->wait_for(version);
}

double elapsed_ms(void* start, void* end) {
  auto* a = static_cast<SimEvent*>(start);
  auto* b = static_cast<SimEvent*>(end);
  TORCH_CHECK(a != nullptr && b != nullptr, "elapsed_time: both events must have been recorded");
  TORCH_CHECK(query_event(a) && query_event(b),
              "elapsed_time: both events must have completed; call synchronize() on them first");
  std::lock_guard<std::mutex> la(a->mu);
  std::lock_guard<std::mutex> lb(b->mu);
  return std::chrono::duration<double, std::milli>(b->reached_at - a->reached_at).count();
}

void destroy_event(void* event) {
  if (event != nullptr) {
    c10::intrusive_ptr<SimEvent>::reclaim(static_cast<SimEvent*>(event));  // drops the handle's reference
  }
}

} // namespace simhpu
