#pragma once
// What a stream runs: one launch record per kernel launch or event marker,
// and the kernel definitions records point at.
#include "runtime/events.h"
#include "runtime/kernel_arg.h"
#include "runtime/launch_site.h"

#include <c10/core/Storage.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace simhpu {

struct LaunchRecord;
using KernelFn = void (*)(KernelArgs& args);
using RecordKernelFn = void (*)(LaunchRecord& record);

// What a kernel's C++ signature says (SIMHPU_KERNEL reads it): how many
// parameters it takes, and bit i set when parameter i is an output (Out<T>,
// kernels/kernel_api.h; from the 64th parameter on, none is told apart).
// params < 0: not known (a kernel that runs on the whole record).
struct KernelSignature {
  int32_t params = -1;
  uint64_t outputs = 0;
};

// A device kernel as the runtime knows it: a name and an entry point. Kernels
// that need the whole record (its kept-alive storages, its payload) set
// run_record instead of run.
struct KernelDef {
  const char* name;
  KernelFn run;
  RecordKernelFn run_record = nullptr;
  // Called instead of running, when the kernel is not run because its inputs
  // are undefined: for kernels others wait on (a collective gives up its turn
  // at once, not when its slot is cleared later).
  RecordKernelFn skipped = nullptr;
  // Called instead of running while the device's values are not computed
  // (phantom execution, see observers.h): what the kernel does beyond device
  // memory (a graph replay settles its records, so their events are reached; a
  // collective takes its turn). Null: nothing.
  RecordKernelFn settle = nullptr;
  KernelSignature signature;
  // A kernel with `settle` whose work beyond device memory involves no other
  // process (a collective whose peers are simulated: its transport answers
  // locally). Where its inputs' values are known, phantom execution may run it.
  bool runs_locally = false;
};

// One slot of a stream's ring. A producer fills it in place and the worker
// runs it there: launching allocates nothing once a slot's small vectors have
// grown to fit. For a kernel, `keep_alive` holds the storages of every tensor
// argument so their memory cannot be freed, or reused, before it ran; the
// launching side clears finished slots (see launch_queue.h).
struct alignas(64) LaunchRecord {
  // Hold: runs nothing; it keeps `keep_alive` until its stream reaches it (memory
  // that pending launches use by address only: see hold_until_streams_pass).
  enum class Kind : uint8_t { Kernel, RecordEvent, WaitEvent, Hold };
  // What every launch reads and writes comes first, on as few cache lines as
  // possible: a slot moves between the launching core and the worker's.
  // In a stream's ring: position + 1 once the slot holding `position` is
  // published. The worker polls this, on the line it reads anyway, rather than
  // the queue's tail, whose line would cross between the cores on every launch.
  std::atomic<uint64_t> published{0};
  Kind kind = Kind::Kernel;
  const KernelDef* kernel = nullptr;
  const char* op_name = "";
  int64_t queued_ns = -1;  // when it was queued, if an observer noted it (on_queued); -1: none did
  uint64_t correlation = 0;  // the profiler's host op that launched it, if an observer noted it
  c10::SmallVector<c10::Storage, 4> keep_alive;
  LaunchSite site;  // where Python launched it, for error messages
  c10::intrusive_ptr<SimEvent> event;  // RecordEvent / WaitEvent
  uint64_t event_version = 0;
  const void* payload = nullptr;  // for run_record kernels: what to run (read-only, outlives the record)
  std::shared_ptr<const void> payload_owner;  // keeps a payload alive that would not otherwise outlive the record
  // Bit i: the kernel writes keep_alive[i] (from the 64th on, all are assumed
  // written). None set: the launch did not say, so it may write all it holds.
  uint64_t written_storages = 0;
  KernelArgs args;

  // Declares that the kernel writes keep_alive[slot] (a negative slot: no storage, nothing to mark).
  void mark_written(int64_t slot) {
    if (slot >= 0) {
      written_storages |= slot < 64 ? uint64_t(1) << slot : ~uint64_t(0);
    }
  }
  // Declares that the kernel writes none of the storages it keeps (it only holds
  // them): bit 63 alone, a slot no record of this kind reaches.
  void mark_writes_nothing() { written_storages = uint64_t(1) << 63; }
  bool may_write(size_t slot) const {
    return written_storages == 0 || slot >= 64 || ((written_storages >> slot) & 1) != 0;
  }

  // Back to an empty kernel record, keeping the vectors' capacity.
  void clear();
  // True while the slot keeps storages or an event alive.
  bool holds_references() const { return !keep_alive.empty() || event || payload_owner; }
};

// `name` as a string that lives for the whole process, as records and traces
// need (kernel and operator names are few; each is kept once).
const char* intern_name(const std::string& name);

// "simhpu kernel 'K' launched by OP at FILE:LINE", for messages about a record.
std::string describe_kernel(const LaunchRecord& record);

// Holds a kernel launch to what its kernel's signature says it writes, before
// it is queued: a tensor argument marked written() must go to an Out<T>
// parameter and an Out<T> parameter must receive one; a launch that marks
// nothing is marked by the signature. Raises (naming the operator, the
// kernel and the argument) for a launch of the wrong arity or marking.
void check_kernel_writes(LaunchRecord& record);

// Runs one record on the calling thread; a kernel's exception becomes the
// message returned. What a failed kernel may have written is marked undefined,
// and a kernel taking undefined memory is not run (see undefined_memory.h).
std::optional<std::string> run_record(LaunchRecord& record);
// Whether this thread is running a kernel now (a worker's, or the launching
// thread's own in blocking mode): what it calls is the part's work, not the host's.
bool running_kernel();

} // namespace simhpu
