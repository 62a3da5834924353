#include "runtime/launch_queue.h"

#include "runtime/device.h"
#include "runtime/trace.h"
#include "runtime/undefined_memory.h"

#include <c10/util/Exception.h>

#include <pthread.h>
#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace simhpu {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kStreamsPerDevice = 1 + kPooledStreams;

// Waking a sleeping thread costs tens of microseconds on these machines, a
// poll well under one. So a worker that ran out of work polls this long before
// it sleeps, and a host thread waiting for the device polls this long (short:
// the device's kernels may want the host's core too).
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
constexpr auto kHostSpin = std::chrono::microseconds(20);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// An asymmetric fence for the sleep/wake hand-off. Each side stores (a new
// tail, or "I am going to sleep") and then loads what the other stored; some
// fence between the two must keep either from missing the other. A full fence
// on every launch stalls the launching thread until the worker's core gives up
// the cache line, so launches get only a compiler barrier and the side about
// to sleep (rare: after kWorkerSpin idle) pays with membarrier(2), which runs
// a full fence on every thread of the process. Without membarrier, both sides
// use full fences.
bool have_membarrier() {
  static const bool available = [] {
#if defined(__linux__) && defined(SYS_membarrier)
    const long commands = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0);
    return commands >= 0 && (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) == 0;
#else
    return false;
#endif
  }();
  return available;
}

inline void light_fence() {
  if (have_membarrier()) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

void heavy_fence() {
#if defined(__linux__) && defined(SYS_membarrier)
  if (have_membarrier() && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0) {
    return;
  }
#endif
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

// Polls `ready` for up to `budget`; true if it became true. The gap between
// polls grows to about a microsecond: each poll pulls the cache line the other
// thread is writing, and a poller that never lets go slows that thread down.
template <typename Ready>
bool spin_until(const Ready& ready, std::chrono::microseconds budget) {
  if (ready()) {
    return true;
  }
  const auto deadline = Clock::now() + budget;
  int gap = 1;
  for (;;) {
    for (int i = 0; i < 8; ++i) {
      for (int k = 0; k < gap; ++k) {
        cpu_relax();
      }
      if (ready()) {
        return true;
      }
      gap = std::min(gap * 2, 32);
    }
    if (Clock::now() >= deadline) {
      return false;
    }
  }
}

// "simhpu kernel 'K' launched by OP at FILE:LINE", for messages about a record.
std::string describe_kernel(const LaunchRecord& record) {
  std::string text = std::string("simhpu kernel '") + record.kernel->name + "' launched by " + record.op_name;
  if (record.site.known()) {
    text += std::string(" at ") + record.site.file() + ":" + std::to_string(record.site.line());
  }
  return text;
}

// What a failed or skipped kernel may have written is undefined from now on.
void mark_written_undefined(const LaunchRecord& record, const FailureMessage& failure) {
  for (size_t i = 0; i < record.keep_alive.size(); ++i) {
    if (record.may_write(i)) {
      mark_undefined(record.keep_alive[i], failure);
    }
  }
}

// The failure that left memory this kernel takes undefined, or null.
FailureMessage undefined_input(const LaunchRecord& record) {
  if (!any_undefined()) {
    return nullptr;
  }
  for (const c10::Storage& storage : record.keep_alive) {
    if (FailureMessage failure = undefined_by(storage)) {
      return failure;
    }
  }
  return nullptr;
}

// Runs one record; a kernel's exception becomes a message.
std::optional<std::string> run_record(LaunchRecord& record) {
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
  // A kernel that would read memory an earlier failure left undefined is not
  // run: its outputs become undefined too, for the same cause, and its stream
  // reports that at its next synchronisation (whichever thread reported the
  // original failure). Work independent of the failure runs as usual.
  if (FailureMessage cause = undefined_input(record)) {
    mark_written_undefined(record, cause);
    return describe_kernel(record) + " was not run: it takes memory left undefined by an earlier failure: " + *cause;
  }
  std::optional<std::string> failure;
  try {
    if (record.kernel->run_record != nullptr) {
      record.kernel->run_record(record);
    } else {
      record.kernel->run(record.args);
    }
    return std::nullopt;
  } catch (const c10::Error& e) {
    failure = describe_kernel(record) + " failed: " + e.what_without_backtrace();
  } catch (const std::exception& e) {
    failure = describe_kernel(record) + " failed: " + e.what();
  }
  mark_written_undefined(record, std::make_shared<const std::string>(*failure));
  return failure;
}

thread_local bool on_worker_thread = false;

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

} // namespace

void LaunchRecord::clear() {
  kind = Kind::Kernel;
  kernel = nullptr;
  op_name = "";
  args.clear();
  keep_alive.clear();
  event.reset();
  event_version = 0;
  payload = nullptr;
  written_storages = 0;
  site = LaunchSite();
  queued_ns = -1;
}

// One stream: a ring of kQueueCapacity slots and a worker thread. Positions
// only grow; position i is ring_[i % capacity]. Producers (under producer_mu_)
// fill position tail_ and publish it by advancing tail_; the worker runs
// positions up to tail_ and advances done_. Finished slots are cleared by the
// producers, not the worker, so the storages they free go back to the
// allocator on the thread that allocates: the two never contend for it, and
// the worker does nothing but run kernels. Both sides poll before they sleep.
class LaunchQueue {
 public:
  explicit LaunchQueue(c10::Stream stream) : stream_(stream), ring_(new LaunchRecord[kQueueCapacity]) {}

  // Takes the producer lock (released by publish or abandon) and returns the next slot.
  LaunchRecord& claim() {
    lock_producers();
    if (!worker_.joinable()) {
      watch_for_fork();
      worker_ = std::thread([this] { work(); });
    }
    const uint64_t position = tail_.load(std::memory_order_relaxed);
    if (holding_ > 0) {
      release_finished_locked();
    }
    if (position - released_ == kQueueCapacity) {
      GilRelease no_gil;
      wait_until_done(position - kQueueCapacity + 1);
      release_finished_locked();
    }
    return ring_[position % kQueueCapacity];
  }

  void publish(const LaunchRecord& record) {
    if (record.holds_references()) {
      ++holding_;
    }
    tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    // Either the worker sees the new tail before it sleeps, or this sees it
    // asleep and wakes it (see light_fence).
    light_fence();
    if (worker_asleep_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      work_ready_.notify_one();
    }
    producer_mu_.unlock();
  }

  void abandon(LaunchRecord& record) {
    record.clear();
    producer_mu_.unlock();
  }

  // Waits for everything queued so far and clears the finished slots; a kernel
  // failure stays for the next synchronize().
  void drain() {
    {
      // Wait without the GIL: other Python threads may be producing the work this waits for.
      GilRelease no_gil;
      wait_until_done(tail_.load(std::memory_order_acquire));
    }
    release_finished();
  }

  void synchronize() {
    drain();
    report_failure();
  }

  bool idle() const {
    return done_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
  }

  void release_finished() {
    lock_producers();
    release_finished_locked();
    producer_mu_.unlock();
  }

 private:
  void lock_producers() {
    if (!producer_mu_.try_lock()) {
      GilRelease no_gil;  // the holder may need the GIL to finish
      producer_mu_.lock();
    }
  }

  void release_finished_locked() {
    const uint64_t done = done_.load(std::memory_order_acquire);
    for (; released_ < done; ++released_) {
      LaunchRecord& record = ring_[released_ % kQueueCapacity];
      if (record.holds_references()) {
        --holding_;
      }
      record.clear();
    }
  }

  // Waits (polling, then asleep) until the worker has finished position `target - 1`.
  void wait_until_done(uint64_t target) {
    const auto reached = [&] { return done_.load(std::memory_order_acquire) >= target; };
    if (spin_until(reached, kHostSpin)) {
      return;
    }
    std::unique_lock<std::mutex> lock(sleep_mu_);
    host_sleepers_.fetch_add(1, std::memory_order_relaxed);
    heavy_fence();
    progress_.wait(lock, reached);
    host_sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

  // The worker's side: returns the new tail once there is work past `head`.
  uint64_t wait_for_work(uint64_t head) {
    const auto has_work = [&] { return tail_.load(std::memory_order_acquire) != head; };
    if (!spin_until(has_work, kWorkerSpin)) {
      std::unique_lock<std::mutex> lock(sleep_mu_);
      worker_asleep_.store(true, std::memory_order_relaxed);
      heavy_fence();
      work_ready_.wait(lock, has_work);
      worker_asleep_.store(false, std::memory_order_relaxed);
    }
    return tail_.load(std::memory_order_acquire);
  }

  void work() {
    on_worker_thread = true;
    uint64_t head = 0;
    for (;;) {
      uint64_t available = tail_.load(std::memory_order_acquire);
      if (available == head) {
        available = wait_for_work(head);
      }
      for (; head < available; ++head) {
        run(ring_[head % kQueueCapacity]);
        // A host going to sleep either sees this progress or is counted in
        // host_sleepers_ and woken (see light_fence).
        done_.store(head + 1, std::memory_order_release);
        light_fence();
        if (host_sleepers_.load(std::memory_order_relaxed) > 0) {
          std::lock_guard<std::mutex> lock(sleep_mu_);
          progress_.notify_all();
        }
      }
    }
  }

  void run(LaunchRecord& record) {
    const int64_t start_ns = record.queued_ns >= 0 ? trace_clock_ns() : 0;
    std::optional<std::string> error = run_record(record);
    if (record.queued_ns >= 0 && record.kind == LaunchRecord::Kind::Kernel) {
      add_trace_entry({record.kernel->name, record.op_name, record.site.file(), record.site.line(),
                       stream_.device_index(), stream_.id(), record.queued_ns, start_ns, trace_clock_ns()});
    }
    if (error) {
      std::lock_guard<std::mutex> lock(failure_mu_);
      if (!failure_) {
        failure_ = std::move(error);
      }
    }
  }

  void report_failure() {
    std::string message;
    {
      std::lock_guard<std::mutex> lock(failure_mu_);
      if (!failure_) {
        return;
      }
      message = std::move(*failure_);
      failure_.reset();
    }
    TORCH_CHECK(false, message);
  }

  // Read-only after construction.
  const c10::Stream stream_;
  const std::unique_ptr<LaunchRecord[]> ring_;

  // Each group on cache lines of its own, so one side's writes do not evict
  // what the other side reads: producers own the first group and tail_, the
  // worker owns done_; the sleep state is read by both but rarely written.
  alignas(64) std::mutex producer_mu_;
  uint64_t released_ = 0;  // positions before this are cleared (under producer_mu_)
  // Published slots not yet cleared that hold references: only while there are
  // some is it worth asking the worker how far it got (reading done_ costs a
  // cache miss per launch; skipping it took empty launches from ~7.3 to ~9 M/s).
  uint64_t holding_ = 0;
  std::thread worker_;

  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) std::atomic<uint64_t> done_{0};

  alignas(64) std::mutex sleep_mu_;
  std::condition_variable work_ready_;  // the worker sleeps on it
  std::condition_variable progress_;    // hosts waiting for done_ sleep on it
  std::atomic<bool> worker_asleep_{false};
  std::atomic<int> host_sleepers_{0};

  alignas(64) std::mutex failure_mu_;
  std::optional<std::string> failure_;  // the first not yet reported
};

namespace {

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

LaunchSlot::LaunchSlot(const c10::Stream& stream) {
  check_not_forked();
  if (launch_blocking()) {
    thread_local LaunchRecord inline_record;
    record_ = &inline_record;
  } else {
    queue_ = &queue_of(stream);
    record_ = &queue_->claim();
  }
}

void LaunchSlot::commit() {
  committed_ = true;
  if (tracing()) {
    record_->queued_ns = trace_clock_ns();
  }
  if (queue_ != nullptr) {
    queue_->publish(*record_);
    return;
  }
  std::optional<std::string> error = run_record(*record_);
  record_->clear();
  TORCH_CHECK(!error, *error);
}

LaunchSlot::~LaunchSlot() {
  if (committed_) {
    return;
  }
  if (queue_ != nullptr) {
    queue_->abandon(*record_);
  } else {
    record_->clear();
  }
}

void drain_launches(c10::DeviceIndex device) {
  if (on_worker_thread) {
    return;  // a kernel allocating: its own queue cannot drain under it
  }
  for (auto& q : streams_of(device).queues) {
    if (LaunchQueue* queue = q.load()) {
      queue->drain();
    }
  }
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
  LaunchSlot slot(stream);
  LaunchRecord& record = slot.record();
  record.kind = LaunchRecord::Kind::RecordEvent;
  record.event = c10::intrusive_ptr<SimEvent>::reclaim_copy(e);
  {
    std::lock_guard<std::mutex> lock(e->mu);
    record.event_version = ++e->recorded;
  }
  slot.commit();
}

void block_on_event(void* event, const c10::Stream& stream) {
  auto* e = static_cast<SimEvent*>(event);
  if (e == nullptr) {
    return;  // never recorded: nothing to wait for
  }
  LaunchSlot slot(stream);
  LaunchRecord& record = slot.record();
  record.kind = LaunchRecord::Kind::WaitEvent;
  record.event = c10::intrusive_ptr<SimEvent>::reclaim_copy(e);
  {
    std::lock_guard<std::mutex> lock(e->mu);
    record.event_version = e->recorded;
  }
  slot.commit();
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
  if (a == b) {
    return 0.0;
  }
  // Both locks at once, deadlock-free whichever order two threads pass the events in.
  std::scoped_lock lock(a->mu, b->mu);
  return std::chrono::duration<double, std::milli>(b->reached_at - a->reached_at).count();
}

void destroy_event(void* event) {
  if (event != nullptr) {
    c10::intrusive_ptr<SimEvent>::reclaim(static_cast<SimEvent*>(event));  // drops the handle's reference
  }
}

} // namespace simhpu
