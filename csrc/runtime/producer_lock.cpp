#include "runtime/producer_lock.h"

#include "runtime/spin.h"

#include <thread>

namespace simhpu {

ProducerLock::ThreadFlag* ProducerLock::this_thread_flag() {
  thread_local ThreadFlag* flag = new ThreadFlag();  // outlives the thread: see owner_
  return flag;
}

bool ProducerLock::try_lock_fast() {
  ThreadFlag* me = this_thread_flag();
  if (owner_.load(std::memory_order_relaxed) != me) {
    return false;
  }
  me->inside.store(true, std::memory_order_relaxed);
  // Either a revoker sees `inside` after its process-wide fence, or this sees
  // `revoking_` (and, once the revoker is done, the new owner).
  light_fence();
  if (!revoking_.load(std::memory_order_acquire) && owner_.load(std::memory_order_relaxed) == me) {
    held_slow_ = false;
    return true;
  }
  me->inside.store(false, std::memory_order_release);
  return false;
}

bool ProducerLock::start_revoking() {
  revoking_.store(true, std::memory_order_relaxed);
  heavy_fence();
  ThreadFlag* owner = owner_.load(std::memory_order_relaxed);
  return owner == nullptr || !owner->inside.load(std::memory_order_acquire);
}

void ProducerLock::wait_for_owner_to_leave() {
  ThreadFlag* owner = owner_.load(std::memory_order_relaxed);
  const auto outside = [&] { return !owner->inside.load(std::memory_order_acquire); };
  // The owner may stay inside for long (waiting for room in a full ring): poll, then yield.
  while (!spin_until(outside, std::chrono::microseconds(20))) {
    std::this_thread::yield();
  }
}

void ProducerLock::unlock() {
  if (!held_slow_) {
    this_thread_flag()->inside.store(false, std::memory_order_release);
    return;
  }
  owner_.store(this_thread_flag(), std::memory_order_relaxed);
  revoking_.store(false, std::memory_order_release);
  slow_mu_.unlock();
}

} // namespace simhpu
