#pragma once
// One stream's in-order queue: a ring of launch records and the worker thread
// that runs them (internal to the runtime; see streams.h for the API).
#include "runtime/launch_record.h"
#include "runtime/producer_lock.h"

#include <c10/core/Stream.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace simhpu {

// How many records a stream's ring holds before a producer waits for room:
// about as deep as CUDA's own launch queue (a slot is about 1 KiB).
constexpr size_t kQueueCapacity = 1024;

// True on a worker thread (a kernel that allocates must not wait for its own queue).
bool on_launch_worker();

// One stream: a ring of kQueueCapacity slots and a worker thread. Positions
// only grow; position i is ring_[i % capacity]. Producers (under producer_lock_)
// fill position tail_ and publish it by advancing tail_; the runner runs
// positions up to tail_, in order, and advances done_. Finished slots are
// cleared by the producers, not the runner, so the storages they free go back
// to the allocator on the thread that allocates. Both sides poll before they sleep.
//
// The runner is whoever holds the runner token: the worker, or a host thread
// waiting for the stream (synchronize, a full ring) that finds the worker not
// running — asleep, descheduled by another process, or between records. That
// host runs the records itself instead of waking the worker and waiting for it
// to be scheduled: the wait it would spend idle becomes the work it waits for,
// on its own core and OpenMP team. The worker takes the token for one record
// at a time, so a waiting host can take over whenever the worker is not inside
// a kernel (another process's thread took its core between two records, say);
// the token is on a line the worker owns. A launching thread that finds the worker
// asleep and nothing queued runs a small kernel itself too, rather than wake it.
class LaunchQueue {
 public:
  explicit LaunchQueue(c10::Stream stream) : stream_(stream), ring_(new LaunchRecord[kQueueCapacity]) {}

  // Takes the producer lock (released by publish or abandon) and returns the next slot.
  LaunchRecord& claim();

  void publish(const LaunchRecord& record);

  void abandon(LaunchRecord& record);

  // Waits for everything queued so far and clears the finished slots; a kernel
  // failure stays for the next synchronize().
  void drain();

  void synchronize();

  // The failure a kernel of this queue left for the next synchronisation, if
  // any; taking it clears it.
  std::optional<std::string> take_failure();

  bool idle() const;

  const c10::Stream& stream() const { return stream_; }

  void release_finished();

 private:
  void lock_producers();

  void release_finished_locked();

  void clear_slot(uint64_t position);

  // Waits until position `target - 1` has run: runs records itself while the
  // worker is not running them, otherwise polls, then sleeps.
  void wait_until_done(uint64_t target);

  // The host's side: if no one is running, runs the records up to `target`
  // (no further than published) on this thread; false if the token was taken.
  bool run_as_host(uint64_t target);

  // The worker's side: returns once there is work and it holds the runner token;
  // true if it found none at first (it was idle).
  bool wait_for_work();

  bool try_become_runner() { return !running_.load(std::memory_order_relaxed) && !running_.exchange(true, std::memory_order_acquire); }
  // Gives the token back; wakes the worker if it sleeps while work remains.
  void stop_running();

  bool published(uint64_t position) const {
    return ring_[position % kQueueCapacity].published.load(std::memory_order_acquire) == position + 1;
  }

  // Runs positions done_ .. end-1 (the caller holds the token).
  void run_until(uint64_t end, bool after_idle);

  void work();

  void run(LaunchRecord& record);

  // Read-only after construction.
  const c10::Stream stream_;
  const std::unique_ptr<LaunchRecord[]> ring_;

  // Each group on cache lines of its own, so one side's writes do not evict
  // what the other side reads: producers own the first group and tail_, the
  // worker owns done_; the sleep state is read by both but rarely written.
  alignas(64) ProducerLock producer_lock_;
  uint64_t released_ = 0;  // positions before this are cleared (under producer_lock_)
  uint64_t seen_done_ = 0;  // done_ when a producer last read it (under producer_lock_)
  // Published slots not yet cleared that hold references: only while there are
  // some is it worth asking the worker how far it got (reading done_ costs a
  // cache miss; slots without references are cleared as they come round).
  uint64_t holding_ = 0;
  // When a producer last launched while the worker slept (see publish).
  std::chrono::steady_clock::time_point last_launch_to_sleeper_{};
  std::thread worker_;

  alignas(64) std::atomic<uint64_t> tail_{0};
  // Both written by the runner only, so they share its cache line.
  alignas(64) std::atomic<uint64_t> done_{0};
  std::atomic<bool> running_{false};  // the runner token

  alignas(64) std::mutex sleep_mu_;
  std::condition_variable work_ready_;  // the worker sleeps on it
  std::condition_variable progress_;    // hosts waiting for done_ sleep on it
  std::atomic<bool> worker_asleep_{false};
  std::atomic<int> host_sleepers_{0};

  alignas(64) std::mutex failure_mu_;
  std::optional<std::string> failure_;  // the first not yet reported
};


} // namespace simhpu
