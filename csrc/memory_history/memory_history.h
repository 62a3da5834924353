#pragma once
// What the caching allocator did, kept while asked (torch.simhpu.memory.
// _record_memory_history): each allocation, free and segment change with the
// Python stack that caused it. torch.simhpu.memory._snapshot() turns it and the
// allocator's segments into the format PyTorch's memory visualiser reads.
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace simhpu {

struct StackFrame {
  std::string file;
  std::string name;
  int line;
};
using Stack = std::shared_ptr<const std::vector<StackFrame>>;

struct MemoryEvent {
  const char* action;  // "alloc", "free_completed", "segment_alloc", "segment_free", "oom"
  uintptr_t address;
  size_t size;
  int64_t time_us;
  Stack frames;
};

extern std::atomic<bool> memory_history_enabled;
inline bool recording_memory_history() {
  return memory_history_enabled.load(std::memory_order_relaxed);
}

// Turns recording on (keeping at most `max_entries` events per device, the oldest
// dropped first) or off (forgetting what was kept). `gather` captures the calling
// thread's Python stack; it is the Python module's, so this room needs no Python.
void set_memory_history(bool enabled, size_t max_entries, std::function<Stack()> gather);
// The calling thread's stack, for the events of the allocator call it is in (null
// while not recording). The allocator takes it before its own lock: it may wait for the GIL.
Stack gather_memory_stack();
void record_memory_event(c10::DeviceIndex device, const char* action, const void* address, size_t size,
                         const Stack& frames);
std::vector<MemoryEvent> memory_events(c10::DeviceIndex device);
// How many events a device has recorded since recording began (those dropped
// for max_entries too): the kept ones are the last memory_events().size().
uint64_t memory_events_recorded(c10::DeviceIndex device);
// The stack that allocated a block still held by a tensor (recorded while on), or null.
Stack allocation_stack(const void* block);

// Called (outside the allocator's lock) before an out-of-memory error is raised.
void set_oom_observer(std::function<void(c10::DeviceIndex, size_t)> observer);
void notify_out_of_memory(c10::DeviceIndex device, size_t requested);

// The allocator's segments of a device: every block it holds, by tensors or cached.
struct SegmentInfo {
  uintptr_t address;
  size_t size;
  bool active;  // held by a tensor
};
std::vector<SegmentInfo> device_segments(c10::DeviceIndex device);

// Every device's capacity becomes `bytes` (its cached blocks given back), if no
// device holds a block; false otherwise.
bool set_device_capacity(size_t bytes);

// A device block an observer kept after its storage died (RuntimeObserver::take_over_free) goes back to its cache.
void release_device_block(void* device_ptr);

} // namespace simhpu
