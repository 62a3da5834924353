#include "runtime/spin.h"

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace simhpu {

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

void heavy_fence() {
#if defined(__linux__) && defined(SYS_membarrier)
  if (have_membarrier() && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0) {
    return;
  }
#endif
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

} // namespace simhpu
