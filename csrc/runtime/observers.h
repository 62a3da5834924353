#pragma once
// The runtime's events, published for whoever watches them: the lenses (chaos
// scheduling, the stream sanitizer, simulated time, phantom execution, the kernel
// trace, the memory history). The runtime names no lens:
// it publishes here, and a lens is one folder that subscribes a RuntimeObserver
// when the library loads.
//
// A lens that is switched off says so (set_active), and an event no active
// observer watches costs the runtime one relaxed atomic load: nothing
// measurable on the launch path.
#include "runtime/launch_work.h"

#include <c10/core/Stream.h>
#include <c10/util/ArrayRef.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace c10 {
class OperatorHandle;
struct IValue;
} // namespace c10
namespace at {
class Tensor;
} // namespace at

namespace simhpu {

struct DeviceTensor;
struct LaunchRecord;

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

  // Values. False: this observer stands in for the device's work (phantom
  // execution): kernels are not run and device memory is neither read nor
  // written; what the host would read, it answers. Constant for an observer.
  virtual bool computes_values() const { return true; }
  // While values are not computed: the host reads a device tensor's values
  // (`op`: a copy to the CPU, item()) into `host_destination`, which the observer fills.
  virtual void on_host_read(const at::Tensor& device_source, const at::Tensor& host_destination, const char* op) {}
  // While values are not computed: `op` is about to run on the host over device
  // values (its result's shape or value depends on them); an observer may refuse by raising.
  virtual void before_host_compute(const char* op) {}
  // While values are not computed, an observer may know some all the same (the
  // host's own data, and what small kernels made from it alone): true, and the
  // kernel runs as ever. Asked once for each kernel record, just before it would
  // run, so the observer learns what each launch writes, whether it ran or not.
  virtual bool computes_launch(const LaunchRecord& record) { return false; }
  // While values are not computed: whether the observer knows `t`'s values (a
  // computation on the host may then read them, and a host read gets them).
  virtual bool knows_values(const at::Tensor& t) { return false; }

  // Launches, on the launching thread and in launch order. A launch is about to
  // be claimed on this thread, outside any other launch (an observer may make launches of its own here).
  virtual void before_launch() {}
  // `record` is about to be queued on `stream`; `work`: what its launcher said
  // it does (launch_work.h), or null. `in_graph`: it is being captured into a
  // graph (it runs, and is seen, when the graph is replayed). An observer
  // subscribed to check launches may raise: the launch then does not happen.
  virtual void on_launch(LaunchRecord& record, const c10::Stream& stream, const LaunchWork* work, bool in_graph) {}
  // `record` (not captured into a graph or a cluster) is about to be queued on
  // `stream` to run; an observer may note in it what it wants back when it runs.
  virtual void on_queued(LaunchRecord& record, const c10::Stream& stream) {}
  // A record is about to run, after its stream's wait (before_kernel), on this
  // thread; then it ran, on `stream`'s worker or (by_host) a host thread waiting for it.
  virtual void before_record_runs(const LaunchRecord& record) {}
  virtual void after_record_ran(const LaunchRecord& record, const c10::Stream& stream, bool by_host) {}
  // A reference-path operator (aten's CPU kernel run for the device) is about to
  // launch: an observer may describe its work (describe_next_launch).
  virtual void on_reference_op(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                               c10::ArrayRef<c10::IValue> outputs) {}

  // The host. It starts waiting for the device (on this thread), then has
  // waited for everything queued so far on a stream / a device / up to an
  // event's last record; after_host_wait: the wait returned normally (an
  // observer may raise what it found meanwhile).
  virtual void on_host_wait_begins() {}
  virtual void on_host_waited_for_stream(const c10::Stream& stream) {}
  virtual void on_host_waited_for_device(c10::DeviceIndex device) {}
  virtual void on_host_waited_for_event(const void* event) {}
  virtual void after_host_wait() {}
  // The host reads (or writes) device memory itself (`op`: what does).
  virtual void on_host_access(const DeviceTensor& tensor, bool write, const char* op) {}
  // The host itself moved `bytes` over the host link (a blocking copy it made).
  virtual void on_host_transfer(double bytes, bool pageable) {}

  // Events. An event dies; the time between two completed events' last records,
  // if this observer keeps time (it may raise when it cannot tell).
  virtual void on_event_destroyed(const void* event) {}
  virtual std::optional<double> elapsed_seconds(const void* start, const void* end) { return std::nullopt; }

  // Memory. A device block handed out for `stream` (its host address and size).
  virtual void on_allocate(const c10::Stream& stream, const void* host_address, size_t bytes) {}
  // tensor.record_stream(stream) on the block at `block_host_address`.
  virtual void on_record_stream(const c10::Stream& stream, const void* block_host_address) {}
  // An allocator call (allocate, free, empty the cache) begins on this thread,
  // before the allocator takes its lock (an observer may wait for the GIL here),
  // and ends; the allocator's events of the call come between, on this thread.
  virtual void before_allocator_call() {}
  virtual void after_allocator_call() {}
  // The allocator did `action` ("alloc", "free_completed", "segment_alloc",
  // "segment_free") on `bytes` at device address `address` of `device`.
  virtual void on_allocator_event(c10::DeviceIndex device, const char* action, const void* address, size_t bytes) {}
  // An allocation of `requested` bytes on `device` is about to fail for want of memory.
  virtual void on_out_of_memory(c10::DeviceIndex device, size_t requested) {}
  // The last storage of a device block died. True: the observer keeps the block
  // for launches still queued and gives it back with release_device_block
  // (runtime/allocator.h) once they ran, having said so with
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
void before_allocator_call();
void after_allocator_call();
void on_allocator_event(c10::DeviceIndex device, const char* action, const void* address, size_t bytes);
void on_out_of_memory(c10::DeviceIndex device, size_t requested);
void before_launch();
void on_launch(LaunchRecord& record, const c10::Stream& stream, const LaunchWork* work, bool in_graph);
void on_reference_op(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                     c10::ArrayRef<c10::IValue> outputs);
void on_queued(LaunchRecord& record, const c10::Stream& stream);
void before_record_runs(const LaunchRecord& record);
void after_record_ran(const LaunchRecord& record, const c10::Stream& stream, bool by_host);
void on_host_wait_begins();
void on_host_waited_for_stream(const c10::Stream& stream);
void on_host_waited_for_device(c10::DeviceIndex device);
void on_host_waited_for_event(const void* event);
void after_host_wait();
void on_host_access(const DeviceTensor& tensor, bool write, const char* op);
void on_host_transfer(double bytes, bool pageable);
void on_event_destroyed(const void* event);
void on_host_read(const at::Tensor& device_source, const at::Tensor& host_destination, const char* op);
void before_host_compute(const char* op);
bool launch_computed(const LaunchRecord& record);
bool values_known(c10::ArrayRef<c10::IValue> args);
extern std::atomic<int> standing_in;
inline bool watched() {
  return active.load(std::memory_order_relaxed) != 0;
}
} // namespace detail

// Observers that check launches (and may refuse one by raising) see each event
// before those that only watch: a refused launch is not seen by the others.
enum class Role { Watches, Checks };
// `observer` watches from now on, for the library's lifetime; it starts inactive.
void subscribe(RuntimeObserver* observer, Role role = Role::Watches);
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
// Brackets an allocator call for the observers (before_allocator_call / after_allocator_call).
class AllocatorCall {
 public:
  AllocatorCall() : watched_(detail::watched()) {
    if (watched_) detail::before_allocator_call();
  }
  ~AllocatorCall() {
    if (watched_) detail::after_allocator_call();
  }
  AllocatorCall(const AllocatorCall&) = delete;
  AllocatorCall& operator=(const AllocatorCall&) = delete;

 private:
  bool watched_;
};
inline void on_allocator_event(c10::DeviceIndex device, const char* action, const void* address, size_t bytes) {
  if (detail::watched()) detail::on_allocator_event(device, action, address, bytes);
}
inline void on_out_of_memory(c10::DeviceIndex device, size_t requested) {
  if (detail::watched()) detail::on_out_of_memory(device, requested);
}
// An observer starts (+1) or stops (-1) keeping a freed block (see take_over_free).
inline void keep(int64_t blocks) {
  detail::kept_blocks.fetch_add(blocks, std::memory_order_relaxed);
}
// Every active observer's context_note, in subscription order.
std::string context_notes();

// Whether the device's values are computed: false while an active observer
// stands in for them (computes_values). One relaxed load.
inline bool values_computed() {
  return detail::standing_in.load(std::memory_order_relaxed) == 0;
}
// While values are not computed (see RuntimeObserver).
inline void on_host_read(const at::Tensor& device_source, const at::Tensor& host_destination, const char* op) {
  detail::on_host_read(device_source, host_destination, op);
}
inline void before_host_compute(const char* op) {
  if (!values_computed()) detail::before_host_compute(op);
}
// Whether a kernel record about to run computes its values: always, unless an
// observer stands in for them; then where every such observer knows its inputs.
inline bool launch_computed(const LaunchRecord& record) {
  return values_computed() || detail::launch_computed(record);
}
// While values are not computed: whether every device tensor in `args` (lists
// too) has values an observer standing in for them knows.
inline bool values_known(c10::ArrayRef<c10::IValue> args) {
  return !values_computed() && detail::values_known(args);
}

// Launch and host events: see RuntimeObserver. One relaxed load while nothing watches.
inline void before_launch() {
  if (detail::watched()) detail::before_launch();
}
inline void on_launch(LaunchRecord& record, const c10::Stream& stream, bool in_graph) {
  if (!detail::watched()) return;
  const std::optional<LaunchWork> work = take_next_launch_work();
  detail::on_launch(record, stream, work ? &*work : nullptr, in_graph);
}
inline void on_reference_op(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                            c10::ArrayRef<c10::IValue> outputs) {
  if (detail::watched()) detail::on_reference_op(op, args, outputs);
}
inline void on_queued(LaunchRecord& record, const c10::Stream& stream) {
  if (detail::watched()) detail::on_queued(record, stream);
}
inline void before_record_runs(const LaunchRecord& record) {
  if (detail::watched()) detail::before_record_runs(record);
}
inline void after_record_ran(const LaunchRecord& record, const c10::Stream& stream, bool by_host) {
  if (detail::watched()) detail::after_record_ran(record, stream, by_host);
}
inline void on_host_wait_begins() {
  if (detail::watched()) detail::on_host_wait_begins();
}
inline void on_host_waited_for_stream(const c10::Stream& stream) {
  if (detail::watched()) detail::on_host_waited_for_stream(stream);
}
inline void on_host_waited_for_device(c10::DeviceIndex device) {
  if (detail::watched()) detail::on_host_waited_for_device(device);
}
inline void on_host_waited_for_event(const void* event) {
  if (detail::watched()) detail::on_host_waited_for_event(event);
}
inline void after_host_wait() {
  if (detail::watched()) detail::after_host_wait();
}
inline void on_host_transfer(double bytes, bool pageable) {
  if (detail::watched()) detail::on_host_transfer(bytes, pageable);
}
// (Callers test watched() first: describing the tensor costs something.)
inline void on_host_access(const DeviceTensor& tensor, bool write, const char* op) {
  detail::on_host_access(tensor, write, op);
}
inline void on_event_destroyed(const void* event) {
  if (detail::watched()) detail::on_event_destroyed(event);
}
// The first active observer's answer that keeps time (elapsed_seconds), or null.
std::optional<double> elapsed_seconds(const void* start, const void* end);

} // namespace observers
} // namespace simhpu
