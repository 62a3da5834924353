#pragma once
// The stream sanitizer (SIMHPU_SANITIZER=1, torch.simhpu.sanitizer): finds a
// launch on one stream that touches memory another stream used, when nothing
// orders the two — what real hardware turns into stale reads and lost writes,
// depending on timing.
//
// It works at launch time, on the launching thread and in launch order, so what
// it finds does not depend on how the workers happen to run. Each stream and the
// host keep a vector clock; event records and waits (wait_stream, wait_event, a
// collective's work.wait()) and the host's synchronisations with streams, events
// and devices carry clocks from one to another. Each launch's tensors (their byte
// spans in device memory, read or written as the launch declares) are checked
// against the accesses recorded on their memory since it was allocated.
//
// Memory is checked as the caching allocator of real hardware would reuse it:
// a block freed while a stream other than the one it was allocated on may still
// use it (no record_stream, no ordering) is a hazard when its allocation stream
// next takes memory the block could serve, if that use is still not ordered
// before the stream by then (the prefetcher's fix: wait for the consumer before
// allocating again). Frees are seen when the storage dies: the launches made
// while it is on hold the block rather than the storage (see on_launch); the
// block goes back to the allocator once the last of them ran. With poisoning on,
// such a block is filled with NaN (or 0xA5 bytes) on its allocation stream when
// it would be handed out, as the new tensor would overwrite it, so an unordered
// read shows in the values.
//
// Pinned host blocks launches use (non_blocking copies from and to them) have a
// history like device blocks, judged by launch order. The host's own accesses
// to them are seen through their program view (the workers use the kernels'
// view, see runtime/pinned_memory.h): read-only while an unordered launch may
// read the block, no access while one may write it. A host access in between
// (refilling a buffer too soon, reading a copy's result before waiting for it)
// faults (see pinned_guard.h), is judged against the block's launches and is
// reported at the next launch or synchronisation.
//
// It observes the runtime (runtime/observers.h), which does not name it:
// launches, host waits and host accesses, allocations, frees, record_stream and
// pinned frees. Off, the runtime's events cost one relaxed atomic load.
#include "runtime/launch_record.h"

#include <c10/core/Stream.h>

#include <atomic>
#include <string>
#include <vector>

namespace simhpu::sanitizer {

enum class Mode : int { Off = 0, Raise = 1, Record = 2 };

namespace detail {
extern std::atomic<int> mode;
} // namespace detail

inline bool enabled() {
  return detail::mode.load(std::memory_order_relaxed) != static_cast<int>(Mode::Off);
}

// Raise: a race raises at the launching call (the launch does not happen).
// Record: races are kept for reports(), and the launch goes ahead.
// Turning it on starts from a clean history: what ran before is assumed ordered.
void set_mode(Mode mode);
Mode mode();

// Whether freed blocks are poisoned (off unless asked for).
void set_poison(bool on);
bool poison();

// The launch path: `record` is about to be queued on `stream` (raises in Raise
// mode). Its storages of device blocks are swapped for holds of the blocks.
void on_launch(LaunchRecord& record, const c10::Stream& stream);

// A launch is about to be claimed on this thread, outside any other launch:
// queues the poisoning of blocks freed since, and raises (Raise mode) what a
// free found.
namespace detail {
extern std::atomic<bool> has_pending;
} // namespace detail
void before_launch_slow();
inline void before_launch() {
  if (detail::has_pending.load(std::memory_order_relaxed)) before_launch_slow();
}
// Raises (Raise mode) what a free found since the last launch; for host waits.
void raise_pending();

// The host has waited for everything queued so far on the stream / the device /
// up to the event's last record.
void on_host_waited_for_stream(const c10::Stream& stream);
void on_host_waited_for_device(c10::DeviceIndex device);
void on_host_waited_for_event(const void* event);

// The host reads (or writes) device memory itself: a copy to or from the CPU.
void on_host_access(const DeviceTensor& tensor, bool write, const char* op);

// A block handed out by the allocator for `stream`: its earlier history no longer applies.
void on_allocate(const c10::Stream& stream, const void* host_address, size_t bytes);

// tensor.record_stream(stream): the block is not reused before `stream` is past
// what was launched on it so far, so that stream's uses need no other ordering.
void on_record_stream(const c10::Stream& stream, const void* block_host_address);

// The allocator's deleter for device blocks: true when the sanitizer holds the
// block (it then checks the free, and the block returns to `release` once the
// launches holding it ran); false: free it now.
namespace detail {
extern std::atomic<size_t> held_blocks;
} // namespace detail
bool take_over_free_slow(c10::DeviceIndex device, void* device_ptr);
inline bool take_over_free(c10::DeviceIndex device, void* device_ptr) {
  return detail::held_blocks.load(std::memory_order_relaxed) != 0 && take_over_free_slow(device, device_ptr);
}
// The program frees a device block whose memory stays held for queued launches
// (a storage resized in place): judged as a free now (see take_over_free).
void on_free(c10::DeviceIndex device, void* device_ptr);
// A pinned host block is freed (the sanitizer stops guarding it).
void on_pinned_free(const void* block);

// What Record mode found, oldest first; and forgetting it.
std::vector<std::string> reports();
void clear_reports();

} // namespace simhpu::sanitizer
