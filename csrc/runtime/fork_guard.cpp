#include "runtime/fork_guard.h"

#include <c10/util/Exception.h>

#include <pthread.h>

#include <atomic>

namespace simhpu {
namespace {

std::atomic<bool> forked_child{false};

void mark_forked_child() {
  forked_child = true;
}

} // namespace

void watch_for_fork() {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, &mark_forked_child);
    return true;
  }();
  (void)registered;
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

} // namespace simhpu
