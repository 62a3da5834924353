#pragma once
// The runtime's events, published for whoever watches them: the lenses (chaos
// scheduling first; the sanitizer, simulated time, memory history and the trace
// follow). The runtime names no lens: it publishes here, and a lens is one
// folder that subscribes a RuntimeObserver when the library loads.
//
// A lens that is switched off says so (set_active), and an event no active
// observer watches costs the runtime one relaxed atomic load: nothing
// measurable on the launch path.
#include <c10/core/Stream.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace simhpu {

class RuntimeObserver {
 public:
  virtual ~RuntimeObserver() = default;
  // On `stream`'s worker, before it runs a record; `after_idle`: the first since it waited for work.
  virtual void before_kernel(const c10::Stream& stream, bool after_idle) {}
  // Whether a host thread may run a stream's records itself while it waits for
  // them (an observer that owns the workers' timing says no).
  virtual bool allows_host_runs() const { return true; }
  // Words for the end of a device error or a report ("(chaos scheduling was on: ...)"), or "".
  virtual std::string context_note() const { return {}; }

  // Memory. A device block handed out for `stream` (its host address and size).
  virtual void on_allocate(const c10::Stream& stream, const void* host_address, size_t bytes) {}
  // tensor.record_stream(stream) on the block at `block_host_address`.
  virtual void on_record_stream(const c10::Stream& stream, const void* block_host_address) {}
  // The last storage of a device block died. True: the observer keeps the block
  // for launches still queued and gives it back with release_device_block
  // (runtime/memory_history.h) once they ran, having said so with
  // observers::keep(+1) and keep(-1); false: the allocator takes it back now.
  virtual bool take_over_free(c10::DeviceIndex device, void* device_ptr) { return false; }
  // The program freed a block whose memory stays held for queued launches (a storage resized in place).
  virtual void on_free_held(c10::DeviceIndex device, void* device_ptr) {}
  // A pinned host block is freed.
  virtual void on_pinned_free(const void* block) {}
};

namespace observers {

namespace detail {
extern std::atomic<int> active;
extern std::atomic<int64_t> kept_blocks;
void before_kernel(const c10::Stream& stream, bool after_idle);
void on_allocate(const c10::Stream& stream, const void* host_address, size_t bytes);
void on_record_stream(const c10::Stream& stream, const void* block_host_address);
bool take_over_free(c10::DeviceIndex device, void* device_ptr);
void on_free_held(c10::DeviceIndex device, void* device_ptr);
void on_pinned_free(const void* block);
inline bool watched() {
  return active.load(std::memory_order_relaxed) != 0;
}
} // namespace detail

// `observer` watches from now on, for the library's lifetime; it starts inactive.
void subscribe(RuntimeObserver* observer);
// Switches a subscribed observer's events on or off.
void set_active(RuntimeObserver* observer, bool active);

inline void before_kernel(const c10::Stream& stream, bool after_idle) {
  if (detail::active.load(std::memory_order_relaxed) != 0) detail::before_kernel(stream, after_idle);
}
bool allow_host_runs();

// Whether any observer is active: test it first where an event's arguments cost something to make.
inline bool watched() {
  return detail::watched();
}

inline void on_allocate(const c10::Stream& stream, const void* host_address, size_t bytes) {
  if (detail::watched()) detail::on_allocate(stream, host_address, bytes);
}
inline void on_record_stream(const c10::Stream& stream, const void* block_host_address) {
  if (detail::watched()) detail::on_record_stream(stream, block_host_address);
}
// Asked while any observer is active or keeps blocks (it may keep them after it was switched off).
inline bool take_over_free(c10::DeviceIndex device, void* device_ptr) {
  return (detail::watched() || detail::kept_blocks.load(std::memory_order_relaxed) != 0) &&
         detail::take_over_free(device, device_ptr);
}
inline void on_free_held(c10::DeviceIndex device, void* device_ptr) {
  if (detail::watched()) detail::on_free_held(device, device_ptr);
}
inline void on_pinned_free(const void* block) {
  if (detail::watched()) detail::on_pinned_free(block);
}
// An observer starts (+1) or stops (-1) keeping a freed block (see take_over_free).
inline void keep(int64_t blocks) {
  detail::kept_blocks.fetch_add(blocks, std::memory_order_relaxed);
}
// Every active observer's context_note, in subscription order.
std::string context_notes();

} // namespace observers
} // namespace simhpu
