#pragma once
// How the launch queue's two sides wait for each other: poll briefly, then
// sleep; and the fences that keep a sleeper from missing a wake-up.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace simhpu {

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
// the cache line, so launches get only a compiler barrier (light_fence) and the
// side about to sleep (rare) pays with membarrier(2), which runs a full fence
// on every thread of the process (heavy_fence). Without membarrier, both sides
// use full fences.
bool have_membarrier();
void heavy_fence();

inline void light_fence() {
  if (have_membarrier()) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

// Polls `ready` for up to `budget`; true if it became true. The gap between
// polls grows to about a microsecond: each poll pulls the cache line the other
// thread is writing, and a poller that never lets go slows that thread down.
template <typename Ready>
bool spin_until(const Ready& ready, std::chrono::microseconds budget) {
  if (ready()) {
    return true;
  }
  const auto deadline = std::chrono::steady_clock::now() + budget;
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
    if (std::chrono::steady_clock::now() >= deadline) {
      return false;
    }
  }
}

} // namespace simhpu
