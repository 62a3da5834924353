#include "memory_history/memory_history.h"

#include "runtime/observers.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace simhpu {

namespace {

std::atomic<bool> recording{false};

struct History {
  std::mutex mu;
  size_t max_entries = 0;
  std::function<Stack()> gather;
  std::unordered_map<c10::DeviceIndex, std::deque<MemoryEvent>> events;
  std::unordered_map<c10::DeviceIndex, uint64_t> recorded;  // since recording began, dropped ones too
  std::unordered_map<const void*, Stack> live_stacks;
  std::function<void(c10::DeviceIndex, size_t)> oom_observer;
};

History& history() {
  static auto* h = new History();  // never destroyed: blocks may be freed at exit
  return *h;
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// The stacks of the allocator calls this thread is in, innermost last (a call
// may free blocks inside another: an allocation that first drains launches).
thread_local std::vector<Stack> call_stacks;

Stack gather_stack() {
  History& h = history();
  std::function<Stack()> gather;
  {
    std::lock_guard<std::mutex> lock(h.mu);
    gather = h.gather;
  }
  return gather ? gather() : nullptr;
}

Stack current_call_stack() {
  return call_stacks.empty() ? nullptr : call_stacks.back();
}

void record_memory_event(c10::DeviceIndex device, const char* action, const void* address, size_t size,
                         const Stack& frames) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mu);
  if (!recording.load(std::memory_order_relaxed)) return;
  auto& events = h.events[device];
  events.push_back({action, reinterpret_cast<uintptr_t>(address), size, now_us(), frames});
  ++h.recorded[device];
  while (events.size() > h.max_entries) events.pop_front();
  const std::string_view what(action);
  if (what == "alloc") {
    h.live_stacks[address] = frames;
  } else if (what == "free_completed") {
    h.live_stacks.erase(address);
  }
}

// What the history sees of the runtime: the allocator's calls and events.
class MemoryHistoryLens final : public RuntimeObserver {
 public:
  MemoryHistoryLens() { observers::subscribe(this); }
  void before_allocator_call() override {
    call_stacks.push_back(recording.load(std::memory_order_relaxed) ? gather_stack() : nullptr);
  }
  void after_allocator_call() override {
    if (!call_stacks.empty()) call_stacks.pop_back();
  }
  void on_allocator_event(c10::DeviceIndex device, const char* action, const void* address, size_t bytes) override {
    if (recording.load(std::memory_order_relaxed)) record_memory_event(device, action, address, bytes, current_call_stack());
  }
  void on_out_of_memory(c10::DeviceIndex device, size_t requested) override {
    if (recording.load(std::memory_order_relaxed)) {
      Stack stack = current_call_stack();
      record_memory_event(device, "oom", nullptr, requested, stack ? stack : gather_stack());
    }
    std::function<void(c10::DeviceIndex, size_t)> observer;
    {
      History& h = history();
      std::lock_guard<std::mutex> lock(h.mu);
      observer = h.oom_observer;
    }
    if (observer) observer(device, requested);
  }
};

MemoryHistoryLens& lens() {
  static MemoryHistoryLens* instance = new MemoryHistoryLens();  // never destroyed: blocks may be freed at exit
  return *instance;
}

// Active while it has something to do (the lock is the caller's).
void update_activity(const History& h) {
  observers::set_active(&lens(), recording.load(std::memory_order_relaxed) || static_cast<bool>(h.oom_observer));
}

} // namespace

bool recording_memory_history() {
  return recording.load(std::memory_order_relaxed);
}

void set_memory_history(bool enabled, size_t max_entries, std::function<Stack()> gather) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mu);
  h.max_entries = max_entries;
  h.gather = enabled ? std::move(gather) : nullptr;
  if (!enabled) {
    h.events.clear();
    h.recorded.clear();
    h.live_stacks.clear();
  }
  recording = enabled;
  update_activity(h);
}

std::vector<MemoryEvent> memory_events(c10::DeviceIndex device, size_t first, size_t count) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.events.find(device);
  if (it == h.events.end() || first >= it->second.size()) return {};
  const size_t last = first + std::min(count, it->second.size() - first);
  return std::vector<MemoryEvent>(it->second.begin() + static_cast<std::ptrdiff_t>(first),
                                  it->second.begin() + static_cast<std::ptrdiff_t>(last));
}

size_t memory_events_kept(c10::DeviceIndex device) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.events.find(device);
  return it == h.events.end() ? 0 : it->second.size();
}

uint64_t memory_events_recorded(c10::DeviceIndex device) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.recorded.find(device);
  return it == h.recorded.end() ? 0 : it->second;
}

Stack allocation_stack(const void* block) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.live_stacks.find(block);
  return it == h.live_stacks.end() ? nullptr : it->second;
}

void set_oom_observer(std::function<void(c10::DeviceIndex, size_t)> observer) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mu);
  h.oom_observer = std::move(observer);
  update_activity(h);
}

} // namespace simhpu
