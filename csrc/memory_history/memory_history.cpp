#include "runtime/memory_history.h"

#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace simhpu {

std::atomic<bool> memory_history_enabled{false};

namespace {

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

} // namespace

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
  memory_history_enabled = enabled;
}

Stack gather_memory_stack() {
  if (!recording_memory_history()) return nullptr;
  History& h = history();
  std::function<Stack()> gather;
  {
    std::lock_guard<std::mutex> lock(h.mu);
    gather = h.gather;
  }
  return gather ? gather() : nullptr;
}

void record_memory_event(c10::DeviceIndex device, const char* action, const void* address, size_t size,
                         const Stack& frames) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mu);
  if (!memory_history_enabled.load(std::memory_order_relaxed)) return;
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

std::vector<MemoryEvent> memory_events(c10::DeviceIndex device) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mu);
  auto it = h.events.find(device);
  return it == h.events.end() ? std::vector<MemoryEvent>() : std::vector<MemoryEvent>(it->second.begin(), it->second.end());
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
}

void notify_out_of_memory(c10::DeviceIndex device, size_t requested) {
  if (recording_memory_history()) record_memory_event(device, "oom", nullptr, requested, gather_memory_stack());
  std::function<void(c10::DeviceIndex, size_t)> observer;
  {
    History& h = history();
    std::lock_guard<std::mutex> lock(h.mu);
    observer = h.oom_observer;
  }
  if (observer) observer(device, requested);
}

} // namespace simhpu
