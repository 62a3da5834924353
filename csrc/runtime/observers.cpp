#include "runtime/observers.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace simhpu::observers {
namespace detail {
std::atomic<int> active{0};
std::atomic<int64_t> kept_blocks{0};
std::atomic<int> standing_in{0};
} // namespace detail

namespace {

struct Subscription {
  RuntimeObserver* observer;
  observers::Role role = Role::Watches;
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

// Those that check first (see Role), then the others, each in subscription order.
template <typename Visit>
void for_each_active(Visit visit) {
  Subscription* table = subscriptions();
  const int n = subscribed.load(std::memory_order_acquire);
  for (Role role : {Role::Checks, Role::Watches}) {
    for (int i = 0; i < n; ++i) {
      if (table[i].role == role && table[i].active.load(std::memory_order_relaxed)) visit(*table[i].observer);
    }
  }
}

} // namespace

void subscribe(RuntimeObserver* observer, Role role) {
  std::lock_guard<std::mutex> lock(subscribe_mu);
  if (find(observer) != nullptr) return;
  const int n = subscribed.load(std::memory_order_relaxed);
  if (n == kMaxObservers) std::abort();  // a build with more lenses than slots: raise kMaxObservers
  subscriptions()[n].observer = observer;
  subscriptions()[n].role = role;
  subscribed.store(n + 1, std::memory_order_release);
}

void set_active(RuntimeObserver* observer, bool active) {
  std::lock_guard<std::mutex> lock(subscribe_mu);
  Subscription* subscription = find(observer);
  if (subscription == nullptr || subscription->active.load(std::memory_order_relaxed) == active) return;
  subscription->active.store(active, std::memory_order_relaxed);
  detail::active.fetch_add(active ? 1 : -1, std::memory_order_relaxed);
  if (!observer->computes_values()) detail::standing_in.fetch_add(active ? 1 : -1, std::memory_order_relaxed);
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

void detail::before_allocator_call() {
  for_each_active([&](RuntimeObserver& o) { o.before_allocator_call(); });
}

void detail::after_allocator_call() {
  for_each_active([&](RuntimeObserver& o) { o.after_allocator_call(); });
}

void detail::on_allocator_event(c10::DeviceIndex device, const char* action, const void* address, size_t bytes) {
  for_each_active([&](RuntimeObserver& o) { o.on_allocator_event(device, action, address, bytes); });
}

void detail::on_out_of_memory(c10::DeviceIndex device, size_t requested) {
  for_each_active([&](RuntimeObserver& o) { o.on_out_of_memory(device, requested); });
}

void detail::before_launch() {
  for_each_active([&](RuntimeObserver& o) { o.before_launch(); });
}

void detail::on_launch(LaunchRecord& record, const c10::Stream& stream, const LaunchWork* work, bool in_graph) {
  for_each_active([&](RuntimeObserver& o) { o.on_launch(record, stream, work, in_graph); });
}

void detail::on_reference_op(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                             c10::ArrayRef<c10::IValue> outputs) {
  for_each_active([&](RuntimeObserver& o) { o.on_reference_op(op, args, outputs); });
}

void detail::on_queued(LaunchRecord& record, const c10::Stream& stream) {
  for_each_active([&](RuntimeObserver& o) { o.on_queued(record, stream); });
}

void detail::before_record_runs(const LaunchRecord& record) {
  for_each_active([&](RuntimeObserver& o) { o.before_record_runs(record); });
}

void detail::after_record_ran(const LaunchRecord& record, const c10::Stream& stream, bool by_host) {
  for_each_active([&](RuntimeObserver& o) { o.after_record_ran(record, stream, by_host); });
}

void detail::on_host_wait_begins() {
  for_each_active([&](RuntimeObserver& o) { o.on_host_wait_begins(); });
}

void detail::on_host_waited_for_stream(const c10::Stream& stream) {
  for_each_active([&](RuntimeObserver& o) { o.on_host_waited_for_stream(stream); });
}

void detail::on_host_waited_for_device(c10::DeviceIndex device) {
  for_each_active([&](RuntimeObserver& o) { o.on_host_waited_for_device(device); });
}

void detail::on_host_waited_for_event(const void* event) {
  for_each_active([&](RuntimeObserver& o) { o.on_host_waited_for_event(event); });
}

void detail::after_host_wait() {
  for_each_active([&](RuntimeObserver& o) { o.after_host_wait(); });
}

void detail::on_host_access(const DeviceTensor& tensor, bool write, const char* op) {
  for_each_active([&](RuntimeObserver& o) { o.on_host_access(tensor, write, op); });
}

void detail::on_host_transfer(double bytes, bool pageable) {
  for_each_active([&](RuntimeObserver& o) { o.on_host_transfer(bytes, pageable); });
}

void detail::on_event_destroyed(const void* event) {
  for_each_active([&](RuntimeObserver& o) { o.on_event_destroyed(event); });
}

void detail::on_host_read(const at::Tensor& device_source, const at::Tensor& host_destination, const char* op) {
  for_each_active([&](RuntimeObserver& o) {
    if (!o.computes_values()) o.on_host_read(device_source, host_destination, op);
  });
}

void detail::before_host_compute(const char* op) {
  for_each_active([&](RuntimeObserver& o) { o.before_host_compute(op); });
}

bool detail::launch_computed(const LaunchRecord& record) {
  bool computed = true;  // (each observer standing in is asked: each learns what the launch writes)
  for_each_active([&](RuntimeObserver& o) {
    if (!o.computes_values() && !o.computes_launch(record)) computed = false;
  });
  return computed;
}

bool detail::values_known(c10::ArrayRef<c10::IValue> args) {
  auto known = [](const at::Tensor& t) {
    if (!t.defined() || !t.is_privateuseone()) return true;
    bool all = true;
    for_each_active([&](RuntimeObserver& o) {
      if (!o.computes_values() && !o.knows_values(t)) all = false;
    });
    return all;
  };
  for (const c10::IValue& arg : args) {
    if (arg.isTensor() && !known(arg.toTensor())) return false;
    if (arg.isList()) {
      for (const c10::IValue& element : arg.toListRef()) {
        if (element.isTensor() && !known(element.toTensor())) return false;
      }
    }
  }
  return true;
}

std::optional<double> elapsed_seconds(const void* start, const void* end) {
  std::optional<double> seconds;
  if (!detail::watched()) return seconds;
  for_each_active([&](RuntimeObserver& o) {
    if (!seconds) seconds = o.elapsed_seconds(start, end);
  });
  return seconds;
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
