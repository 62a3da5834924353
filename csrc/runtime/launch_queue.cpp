#include "runtime/launch_queue.h"

#include "chaos/chaos_scheduler.h"
#include "runtime/fork_guard.h"
#include "runtime/launch_site.h"
#include "runtime/spin.h"
#include "runtime/trace.h"

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

thread_local bool on_worker_thread = false;

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

void LaunchQueue::publish(const LaunchRecord& record) {
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

void LaunchQueue::abandon(LaunchRecord& record) {
  record.clear();
  producer_mu_.unlock();
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
  producer_mu_.unlock();
}

void LaunchQueue::lock_producers() {
  if (!producer_mu_.try_lock()) {
    GilRelease no_gil;  // the holder may need the GIL to finish
    producer_mu_.lock();
  }
}

void LaunchQueue::release_finished_locked() {
  const uint64_t done = done_.load(std::memory_order_acquire);
  for (; released_ < done; ++released_) {
    LaunchRecord& record = ring_[released_ % kQueueCapacity];
    if (record.holds_references()) {
      --holding_;
    }
    record.clear();
  }
}

void LaunchQueue::wait_until_done(uint64_t target) {
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

uint64_t LaunchQueue::wait_for_work(uint64_t head) {
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

void LaunchQueue::work() {
  on_worker_thread = true;
  // Named for top -H, perf and benchmarks/step_breakdown.py ("simhpu0.s1": device 0, stream 1);
  // the OpenMP helpers its kernels start inherit the name.
  const std::string name = "simhpu" + std::to_string(stream_.device_index()) + ".s" + std::to_string(stream_.id());
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  // Kernels that call ATen (the reference path runs CPU kernels here) do so
  // under one fixed state, not a thread's defaults: no autograd recording,
  // forward or reverse, whatever the launching thread had enabled.
  const c10::AutoGradMode no_grad(false);
  const c10::AutoFwGradMode no_forward_grad(false);
  const c10::impl::ExcludeDispatchKeyGuard no_autograd_keys(c10::autograd_dispatch_keyset);
  uint64_t head = 0;
  for (;;) {
    uint64_t available = tail_.load(std::memory_order_acquire);
    bool after_idle = available == head;
    if (after_idle) {
      available = wait_for_work(head);
    }
    for (; head < available; ++head) {
      chaos::before_kernel(stream_, after_idle);
      after_idle = false;
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

void LaunchQueue::run(LaunchRecord& record) {
  const int64_t start_ns = record.queued_ns >= 0 ? trace_clock_ns() : 0;
  std::optional<std::string> error = run_record(record);
  if (record.queued_ns >= 0 && record.kind == LaunchRecord::Kind::Kernel) {
    add_trace_entry({record.kernel->name, record.op_name, record.site.file(), record.site.line(),
                     stream_.device_index(), stream_.id(), record.queued_ns, start_ns, trace_clock_ns(),
                     record.correlation});
  }
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
  if (failure && chaos::enabled()) {
    *failure += chaos::note();
  }
  return failure;
}

} // namespace simhpu
