#include "runtime/observers.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace simhpu::observers {
namespace detail {
std::atomic<int> active{0};
std::atomic<int64_t> kept_blocks{0};
} // namespace detail

namespace {

struct Subscription {
  RuntimeObserver* observer;
  std::atomic<bool> active{false};
};

// Subscriptions are made while the library loads (static initialisers, one
// thread) and never removed, so readers walk the list without a lock. A fixed
// array: its elements never move.
constexpr int kMaxObservers = 16;
Subscription* subscriptions() {
  static Subscription table[kMaxObservers];
  return table;
}
std::atomic<int> subscribed{0};
std::mutex subscribe_mu;

Subscription* find(RuntimeObserver* observer) {
  Subscription* table = subscriptions();
  const int n = subscribed.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (table[i].observer == observer) return &table[i];
  }
  return nullptr;
}

template <typename Visit>
void for_each_subscribed(Visit visit) {
  Subscription* table = subscriptions();
  const int n = subscribed.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) visit(*table[i].observer);
}

template <typename Visit>
void for_each_active(Visit visit) {
  Subscription* table = subscriptions();
  const int n = subscribed.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (table[i].active.load(std::memory_order_relaxed)) visit(*table[i].observer);
  }
}

} // namespace

void subscribe(RuntimeObserver* observer) {
  std::lock_guard<std::mutex> lock(subscribe_mu);
  if (find(observer) != nullptr) return;
  const int n = subscribed.load(std::memory_order_relaxed);
  if (n == kMaxObservers) std::abort();  // a build with more lenses than slots: raise kMaxObservers
  subscriptions()[n].observer = observer;
  subscribed.store(n + 1, std::memory_order_release);
}

void set_active(RuntimeObserver* observer, bool active) {
  std::lock_guard<std::mutex> lock(subscribe_mu);
  Subscription* subscription = find(observer);
  if (subscription == nullptr || subscription->active.load(std::memory_order_relaxed) == active) return;
  subscription->active.store(active, std::memory_order_relaxed);
  detail::active.fetch_add(active ? 1 : -1, std::memory_order_relaxed);
}

void detail::before_kernel(const c10::Stream& stream, bool after_idle) {
  for_each_active([&](RuntimeObserver& o) { o.before_kernel(stream, after_idle); });
}

void detail::on_allocate(const c10::Stream& stream, const void* host_address, size_t bytes) {
  for_each_active([&](RuntimeObserver& o) { o.on_allocate(stream, host_address, bytes); });
}

void detail::on_record_stream(const c10::Stream& stream, const void* block_host_address) {
  for_each_active([&](RuntimeObserver& o) { o.on_record_stream(stream, block_host_address); });
}

bool detail::take_over_free(c10::DeviceIndex device, void* device_ptr) {
  // Every subscriber, active or not: one switched off may still keep blocks.
  bool taken = false;
  for_each_subscribed([&](RuntimeObserver& o) { taken = taken || o.take_over_free(device, device_ptr); });
  return taken;
}

void detail::on_free_held(c10::DeviceIndex device, void* device_ptr) {
  for_each_active([&](RuntimeObserver& o) { o.on_free_held(device, device_ptr); });
}

void detail::on_pinned_free(const void* block) {
  for_each_active([&](RuntimeObserver& o) { o.on_pinned_free(block); });
}

bool allow_host_runs() {
  if (detail::active.load(std::memory_order_relaxed) == 0) return true;
  bool allowed = true;
  for_each_active([&](RuntimeObserver& o) { allowed = allowed && o.allows_host_runs(); });
  return allowed;
}

std::string context_notes() {
  std::string notes;
  if (detail::active.load(std::memory_order_relaxed) == 0) return notes;
  for_each_active([&](RuntimeObserver& o) { notes += o.context_note(); });
  return notes;
}

} // namespace simhpu::observers
