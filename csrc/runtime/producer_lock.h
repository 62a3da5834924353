#pragma once
// The lock a stream's producers take for each launch, biased towards the one
// thread that feeds the stream (internal to the runtime; see launch_queue.h).
#include <atomic>
#include <mutex>

namespace simhpu {

// A stream is nearly always fed by one thread, its owner, which takes this lock
// with plain stores and loads. An atomic read-modify-write per launch (a mutex)
// stalls the launching core until the previous launch's record has reached the
// worker's core, and that trip is what a launch costs where cores are far apart
// (measured here: 13.7 M empty launches/s with std::mutex, 21.5 M without).
//
// Any other thread takes the slow path: under a mutex it raises `revoking_`,
// makes every thread of the process fence (membarrier, see spin.h), waits for
// the owner to be outside, and on unlocking becomes the owner itself. The owner
// finding `revoking_` raised takes the slow path too. A thread that alternates
// with another pays a process-wide fence per switch, not per launch.
class ProducerLock {
 public:
  // May wait; `before_waiting` runs once first if it must (to release the GIL).
  template <typename BeforeWaiting>
  void lock(const BeforeWaiting& before_waiting) {
    if (!try_lock_fast()) lock_slow(before_waiting);
  }
  void unlock();

 private:
  // One per thread that ever launched, never freed: `owner_` may point at the
  // flag of a thread that has exited.
  struct alignas(64) ThreadFlag {
    std::atomic<bool> inside{false};
  };
  static ThreadFlag* this_thread_flag();

  bool try_lock_fast();
  // `before_waiting` runs (once) before any wait: for the mutex, and for the
  // biased owner to leave, which may need what the caller holds (the GIL: an
  // owner waiting for room in a full ring takes it back before it can leave).
  template <typename BeforeWaiting>
  void lock_slow(const BeforeWaiting& before_waiting) {
    bool prepared = false;
    if (!slow_mu_.try_lock()) {
      before_waiting();
      prepared = true;
      slow_mu_.lock();
    }
    if (!start_revoking()) {
      if (!prepared) before_waiting();
      wait_for_owner_to_leave();
    }
    held_slow_ = true;
  }
  // Makes new fast entries fail; true if the owner (if any) is not inside.
  bool start_revoking();
  void wait_for_owner_to_leave();

  alignas(64) std::atomic<ThreadFlag*> owner_{nullptr};
  std::atomic<bool> revoking_{false};
  bool held_slow_ = false;  // written and read by the holder only
  std::mutex slow_mu_;
};

} // namespace simhpu
