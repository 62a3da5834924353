#include "runtime/launch_queue.h"

#include "runtime/env_flags.h"
#include "runtime/fork_guard.h"
#include "runtime/launch_site.h"
#include "runtime/observers.h"
#include "runtime/spin.h"

#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <pthread.h>

#include <string>

namespace simhpu {
namespace {

// Waking a sleeping thread costs tens of microseconds on these machines, a
// poll well under one. So a worker that ran out of work polls this long before
// it sleeps, and a host thread waiting for the device polls this long (short:
// the device's kernels may want the host's core too).
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
constexpr auto kHostSpin = std::chrono::microseconds(20);

// How many slots a producer that finds the ring full waits to have cleared.
constexpr uint64_t kRoomPerWait = 64;

// Finished launches' storages go back to the allocator this many launches at a
// time: asking how far the worker got reads a cache line the worker writes on
// every record, a miss of about a core-to-core hand-off (synchronisation, and an
// allocation that finds the device full, release them all at once).
constexpr uint64_t kReleaseBatch = 16;

thread_local bool on_worker_thread = false;  // also while a host thread runs records
thread_local bool is_stream_worker = false;

// The state kernels run under, whichever thread runs them: no autograd
// recording, forward or reverse; none of the dispatch keys a launching thread
// may have included or excluded (a Python dispatch mode, autocast); "on a
// worker" for the runtime's own checks (a kernel that allocates must not wait
// for its queue).
class KernelThreadState {
 public:
  KernelThreadState()
      : keys_(c10::default_included_set, c10::default_excluded_set | c10::autograd_dispatch_keyset),
        was_on_worker_(on_worker_thread) {
    on_worker_thread = true;
  }
  ~KernelThreadState() { on_worker_thread = was_on_worker_; }
  KernelThreadState(const KernelThreadState&) = delete;
  KernelThreadState& operator=(const KernelThreadState&) = delete;

 private:
  c10::impl::ForceDispatchKeyGuard keys_;
  c10::AutoGradMode no_grad_{false};
  c10::AutoFwGradMode no_forward_grad_{false};
  bool was_on_worker_;
};

// A host thread runs a stream's records while it waits for them unless
// SIMHPU_HOST_RUNS=0, or an observer owns the workers' timing (chaos scheduling).
bool host_may_run() {
  static const bool allowed = env_flag("SIMHPU_HOST_RUNS", true);
  return allowed && !on_worker_thread && observers::allow_host_runs();
}

// A kernel that a launching thread may run itself when the worker sleeps with
// nothing queued: one that names its tensors (not a graph, a compiled cluster
// or a collective, whose work the record does not show, nor a kernel without
// tensors, such as the device-occupying diagnostic) and reads and writes at
// most kRunHereBytes of them: a few microseconds of work, less than a wake-up.
constexpr size_t kRunHereBytes = 64 * 1024;
// Launches closer together than this (a loop of launches and little else, a
// kernel run here between them) are a burst: the worker is woken for them.
// Further apart (the host does work of its own between them), each runs here.
constexpr auto kBurst = std::chrono::microseconds(10);

bool small_enough_to_run_here(const LaunchRecord& record) {
  if (record.kind != LaunchRecord::Kind::Kernel || record.payload_owner) {
    return false;
  }
  size_t bytes = 0;
  size_t tensors = 0;
  const auto add = [&](const DeviceTensor& t) {
    if (t.dtype != c10::ScalarType::Undefined) {
      bytes += static_cast<size_t>(t.numel()) * c10::elementSize(t.dtype);
      ++tensors;
    }
  };
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg)) {
      add(*t);
    } else if (const auto* list = std::get_if<std::vector<DeviceTensor>>(&arg)) {
      for (const DeviceTensor& t : *list) add(t);
    } else if (std::holds_alternative<c10::IValue>(arg)) {
      return false;  // a value the record does not describe
    }
  }
  return tensors > 0 && bytes <= kRunHereBytes;
}

} // namespace

bool on_launch_worker() {
  return on_worker_thread;
}

LaunchRecord& LaunchQueue::claim() {
  lock_producers();
  if (!worker_.joinable()) {
    watch_for_fork();
    worker_ = std::thread([this] { work(); });
  }
  const uint64_t position = tail_.load(std::memory_order_relaxed);
  if (holding_ > 0 && position - released_ >= kReleaseBatch) {
    release_finished_locked();
  }
  if (position - released_ == kQueueCapacity) {
    // The slot to fill is the oldest not yet cleared.
    if (seen_done_ <= released_) {
      seen_done_ = done_.load(std::memory_order_acquire);
    }
    if (seen_done_ <= released_) {
      GilRelease no_gil;
      // Room for a batch, not one slot: a host that runs the records itself
      // (the worker not running) then alternates batches of launches and runs.
      wait_until_done(position - kQueueCapacity + kRoomPerWait);
      seen_done_ = done_.load(std::memory_order_acquire);
    }
    // Only this slot: the others are cleared as they come round, so a producer
    // never stops to clear the whole ring while the worker waits for it.
    clear_slot(released_++);
  }
  return ring_[position % kQueueCapacity];
}

void LaunchQueue::publish(const LaunchRecord& record) {
  if (record.holds_references()) {
    ++holding_;
  }
  const uint64_t position = tail_.load(std::memory_order_relaxed);
  ring_[position % kQueueCapacity].published.store(position + 1, std::memory_order_release);
  tail_.store(position + 1, std::memory_order_release);
  // Either the worker sees the slot published before it sleeps, or this sees
  // it asleep and wakes it (see light_fence).
  light_fence();
  if (worker_asleep_.load(std::memory_order_relaxed)) {
    // Waking it costs this thread a system call and the worker tens of
    // microseconds, and its spinning afterwards takes a core from the host's
    // own work: a small kernel with nothing ahead of it runs here instead —
    // unless the last launch that found the worker asleep was moments ago.
    // Launches that close together are a burst, which a woken worker takes
    // over while the host goes on launching.
    const auto now = std::chrono::steady_clock::now();
    const bool burst = now - last_launch_to_sleeper_ < kBurst;
    last_launch_to_sleeper_ = now;
    const bool ran_here = !burst && host_may_run() && done_.load(std::memory_order_acquire) == position &&
        small_enough_to_run_here(record) && run_as_host(position + 1);
    if (!ran_here) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      work_ready_.notify_one();
    }
  }
  producer_lock_.unlock();
}

void LaunchQueue::abandon(LaunchRecord& record) {
  record.clear();
  producer_lock_.unlock();
}

void LaunchQueue::drain() {
  {
    // Wait without the GIL: other Python threads may be producing the work this waits for.
    GilRelease no_gil;
    wait_until_done(tail_.load(std::memory_order_acquire));
  }
  release_finished();
}

void LaunchQueue::synchronize() {
  drain();
  if (std::optional<std::string> failure = take_failure()) {
    TORCH_CHECK(false, *failure);
  }
}

bool LaunchQueue::idle() const {
  return done_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
}

void LaunchQueue::release_finished() {
  lock_producers();
  release_finished_locked();
  producer_lock_.unlock();
}

void LaunchQueue::lock_producers() {
  std::optional<GilRelease> no_gil;
  producer_lock_.lock([&] { no_gil.emplace(); });  // the holder may need the GIL to finish
}

void LaunchQueue::release_finished_locked() {
  seen_done_ = done_.load(std::memory_order_acquire);
  while (released_ < seen_done_) {
    clear_slot(released_++);
  }
}

void LaunchQueue::clear_slot(uint64_t position) {
  LaunchRecord& record = ring_[position % kQueueCapacity];
  if (record.holds_references()) {
    --holding_;
  }
  record.clear();
}

void LaunchQueue::wait_until_done(uint64_t target) {
  const auto reached = [&] { return done_.load(std::memory_order_acquire) >= target; };
  const bool may_run = host_may_run();
  // Stops polling early when the token comes free: the host can run the rest itself.
  const auto reached_or_free = [&] { return reached() || (may_run && !running_.load(std::memory_order_relaxed)); };
  while (!reached()) {
    if (may_run && run_as_host(target)) {
      continue;
    }
    if (spin_until(reached_or_free, kHostSpin)) {
      continue;
    }
    // The worker is running a long kernel, or was descheduled holding the token.
    std::unique_lock<std::mutex> lock(sleep_mu_);
    host_sleepers_.fetch_add(1, std::memory_order_relaxed);
    heavy_fence();
    progress_.wait(lock, reached);
    host_sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
}

bool LaunchQueue::run_as_host(uint64_t target) {
  if (!try_become_runner()) {
    return false;
  }
  {
    const KernelThreadState kernel_state;
    // Kernels the host runs are the device's work, not host operators a profiler should list.
    const at::DisableRecordFunctionGuard not_host_operators;
    run_until(std::min(target, tail_.load(std::memory_order_acquire)), /*after_idle=*/false);
  }
  stop_running();
  return true;
}

void LaunchQueue::stop_running() {
  running_.store(false, std::memory_order_release);
  // Either the worker sees the token free before it sleeps, or this sees it asleep (see light_fence).
  light_fence();
  if (worker_asleep_.load(std::memory_order_relaxed) &&
      tail_.load(std::memory_order_acquire) != done_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    work_ready_.notify_one();
  }
}

void LaunchQueue::run_until(uint64_t end, bool after_idle) {
  for (uint64_t position = done_.load(std::memory_order_relaxed); position < end; ++position) {
    observers::before_kernel(stream_, after_idle);
    after_idle = false;
    run(ring_[position % kQueueCapacity]);
    // A host going to sleep either sees this progress or is counted in
    // host_sleepers_ and woken (see light_fence).
    done_.store(position + 1, std::memory_order_release);
    light_fence();
    if (host_sleepers_.load(std::memory_order_relaxed) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      progress_.notify_all();
    }
  }
}

bool LaunchQueue::wait_for_work() {
  const bool idle = !published(done_.load(std::memory_order_relaxed));
  const auto has_work = [&] {
    return published(done_.load(std::memory_order_acquire)) && !running_.load(std::memory_order_relaxed);
  };
  for (;;) {
    if (!spin_until(has_work, kWorkerSpin)) {
      std::unique_lock<std::mutex> lock(sleep_mu_);
      worker_asleep_.store(true, std::memory_order_relaxed);
      heavy_fence();
      work_ready_.wait(lock, has_work);
      worker_asleep_.store(false, std::memory_order_relaxed);
    }
    if (try_become_runner()) {
      return idle;
    }
  }
}

void LaunchQueue::work() {
  is_stream_worker = true;
  // Named for top -H, perf and benchmarks/step_breakdown.py ("simhpu0.s1": device 0, stream 1);
  // the OpenMP helpers its kernels start inherit the name.
  const std::string name = "simhpu" + std::to_string(stream_.device_index()) + ".s" + std::to_string(stream_.id());
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  // Kernels that call ATen (the reference path runs CPU kernels here) do so
  // under one fixed state, not a thread's defaults (as a host running them does).
  const KernelThreadState kernel_state;
  for (;;) {
    const bool after_idle = wait_for_work();
    // A turn: one record, then the token goes back. (A host may have run the
    // rest between the worker's look and its taking the token.)
    const uint64_t done = done_.load(std::memory_order_relaxed);
    if (published(done)) {
      run_until(done + 1, after_idle);
    }
    stop_running();
  }
}

void LaunchQueue::run(LaunchRecord& record) {
  observers::before_record_runs(record);
  std::optional<std::string> error = run_record(record);
  observers::after_record_ran(record, stream_, !is_stream_worker);
  if (error) {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (!failure_) {
      failure_ = std::move(error);
    }
  }
}

std::optional<std::string> LaunchQueue::take_failure() {
  std::lock_guard<std::mutex> lock(failure_mu_);
  std::optional<std::string> failure = std::move(failure_);
  failure_.reset();
  if (failure) {
    *failure += observers::context_notes();
  }
  return failure;
}

} // namespace simhpu
