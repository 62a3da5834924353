#pragma once
// The memory history, a lens: what the caching allocator did, kept while asked
// (torch.simhpu.memory._record_memory_history): each allocation, free and
// segment change with the Python stack that caused it.
// torch.simhpu.memory._snapshot() turns it and the allocator's segments
// (runtime/allocator.h) into the format PyTorch's memory visualiser reads.
//
// The runtime does not call it: it subscribes to the runtime's observers
// (runtime/observers.h), active while the history is recorded or an
// out-of-memory observer is set.
#include <c10/core/Device.h>

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

// Whether the history is being recorded.
bool recording_memory_history();

// Turns recording on (keeping at most `max_entries` events per device, the oldest
// dropped first) or off (forgetting what was kept). `gather` captures the calling
// thread's Python stack; it is the Python module's, so this room needs no Python.
void set_memory_history(bool enabled, size_t max_entries, std::function<Stack()> gather);
// The kept events from position `first` on, at most `count` of them (a long history is read
// a slice at a time, never copied whole).
std::vector<MemoryEvent> memory_events(c10::DeviceIndex device, size_t first = 0, size_t count = SIZE_MAX);
// How many events a device has recorded since recording began (those dropped
// for max_entries too): the kept ones are the last memory_events().size().
uint64_t memory_events_recorded(c10::DeviceIndex device);
// How many events a device's history keeps now.
size_t memory_events_kept(c10::DeviceIndex device);
// The stack that allocated a block still held by a tensor (recorded while on), or null.
Stack allocation_stack(const void* block);

// `observer` is called (outside the allocator's lock) before an out-of-memory
// error is raised, whether or not the history is recorded; null: no one.
void set_oom_observer(std::function<void(c10::DeviceIndex, size_t)> observer);

} // namespace simhpu
