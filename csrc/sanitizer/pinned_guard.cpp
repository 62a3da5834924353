#include "sanitizer/pinned_guard.h"

#include "sanitizer/stream_sanitizer.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <array>
#include <atomic>
#include <mutex>

namespace simhpu::sanitizer::pinned {
namespace {

// The handler reads these without locks (a signal handler may take none): a
// slot is published by storing `begin` last and retired by clearing it first.
struct Slot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<size_t> size{0};
  std::atomic<bool> hit{false};
  std::atomic<bool> wrote{false};
};
std::array<Slot, 256> slots;
std::atomic<bool> hits{false};
std::mutex mu;  // protect/take_hits among themselves
struct sigaction previous;
bool installed = false;

// Whether the faulting access was a write (x86-64 reports it in the page-fault
// error code; elsewhere a fault is taken as a write, the stricter reading).
bool fault_was_write(void* context) {
#if defined(__x86_64__)
  constexpr long kWriteBit = 2;
  return (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & kWriteBit) != 0;
#else
  (void)context;
  return true;
#endif
}

void on_fault(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& slot : slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin != 0 && address >= begin && address < begin + slot.size.load(std::memory_order_relaxed)) {
      mprotect(reinterpret_cast<void*>(begin), slot.size.load(std::memory_order_relaxed), PROT_READ | PROT_WRITE);
      if (fault_was_write(context)) slot.wrote.store(true, std::memory_order_relaxed);
      slot.hit.store(true, std::memory_order_release);
      hits.store(true, std::memory_order_release);
      sanitizer::detail::has_pending.store(true, std::memory_order_relaxed);  // the next launch reports it
      return;  // the access is retried, and now succeeds
    }
  }
  // Not ours: as the handler before would have.
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(signal, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal);
  } else {
    sigaction(SIGSEGV, &previous, nullptr);  // the fault repeats, and is fatal as it would have been
  }
}

void install_once() {
  if (installed) return;
  struct sigaction action {};
  action.sa_sigaction = &on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &previous);
  installed = true;
}

int protection_of(Access allowed) {
  switch (allowed) {
    case Access::None: return PROT_NONE;
    case Access::Read: return PROT_READ;
    case Access::ReadWrite: break;
  }
  return PROT_READ | PROT_WRITE;
}

} // namespace

bool protect(uintptr_t begin, size_t size, Access allowed) {
  std::lock_guard<std::mutex> lock(mu);
  Slot* mine = nullptr;
  Slot* free_slot = nullptr;
  for (Slot& slot : slots) {
    const uintptr_t b = slot.begin.load(std::memory_order_relaxed);
    if (b == begin) mine = &slot;
    if (b == 0 && free_slot == nullptr && !slot.hit.load(std::memory_order_relaxed)) free_slot = &slot;
  }
  if (allowed == Access::ReadWrite) {
    if (mine == nullptr) return true;
    mine->begin.store(0, std::memory_order_release);  // retired first: the handler no longer claims it
    if (!mine->hit.load(std::memory_order_acquire)) mprotect(reinterpret_cast<void*>(begin), size, PROT_READ | PROT_WRITE);
    mine->hit.store(false, std::memory_order_relaxed);  // (a hit on a block being lifted is dropped)
    mine->wrote.store(false, std::memory_order_relaxed);
    return true;
  }
  install_once();
  if (mine == nullptr) {
    if (free_slot == nullptr) return false;
    mine = free_slot;
    mine->size.store(size, std::memory_order_relaxed);
    mine->begin.store(begin, std::memory_order_release);
  }
  if (mprotect(reinterpret_cast<void*>(begin), size, protection_of(allowed)) != 0) {
    mine->begin.store(0, std::memory_order_release);
    return false;
  }
  return true;
}

std::vector<Hit> take_hits() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<Hit> out;
  if (!hits.exchange(false, std::memory_order_acq_rel)) return out;
  for (Slot& slot : slots) {
    if (!slot.hit.load(std::memory_order_acquire)) continue;
    out.push_back({slot.begin.load(std::memory_order_relaxed), slot.wrote.load(std::memory_order_relaxed)});
    slot.begin.store(0, std::memory_order_release);
    slot.hit.store(false, std::memory_order_relaxed);
    slot.wrote.store(false, std::memory_order_relaxed);
  }
  return out;
}

bool any_hit() {
  return hits.load(std::memory_order_acquire);
}

} // namespace simhpu::sanitizer::pinned
