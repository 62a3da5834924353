#pragma once
// Simulated time (SIMHPU_DEVICE_PROFILE, torch.simhpu.set_profile / simulate):
// how long the program would take on the part a profile describes, launch by
// launch, with the program's own stream and event order.
//
// Like the sanitizer it works at launch time, on the launching thread and in
// launch order, so the timeline does not depend on how the CPU workers happen
// to run. Each stream has a clock; a kernel starts at the latest of its
// stream's clock and the moment the host launched it (plus the part's launch
// latency), and ends after its cost (launch_cost.h). An event recorded on a
// stream takes the stream's time; a stream waiting on it moves to at least that
// time. The host clock advances by the part's dispatch time per operator and
// launch time per kernel (plus, with measured host time, the program's own time
// between operators), and jumps to the device's when the host waits for a stream,
// the device or an event. The program's own time is the launching thread's CPU
// time outside aten operators: simhpu's dispatch is not the part's, and what the
// thread spends blocked waiting for the CPU workers that stand in for the part
// is not the host's. With the modelled host (the default) nothing of how this
// machine ran the program reaches the timeline.
//
// It observes the runtime (runtime/observers.h): launches, with what their
// launchers said they do (runtime/launch_work.h: FLOP formulas, copies over the
// host link, collectives), host waits and events. The runtime does not name it;
// it is active while a profile is set.
#include "runtime/launch_record.h"
#include "simclock/device_profile.h"
#include "simclock/launch_cost.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace simhpu::simclock {

namespace detail {
extern std::atomic<bool> on;
} // namespace detail

// Whether simulated time is on (a device profile is set).
inline bool enabled() {
  return detail::on.load(std::memory_order_relaxed);
}

enum class HostTime : int { Measured = 0, Modelled = 1 };

// Turns simulated time on with `profile` (clocks start at zero), or off.
void set_profile(std::optional<DeviceProfile> profile);
std::optional<DeviceProfile> profile();
void set_host_time(HostTime mode);
HostTime host_time_mode();

// For reference-path operators: counts an operator's FLOPs (set from Python,
// from torch.utils.flop_counter's formulas) for the operators named, and the
// shape of its GEMM where it is one (0: not known; see LaunchWork).
struct MatrixLaunch {
  double flops = 0;
  int64_t batch = 0, m = 0, n = 0, k = 0;
  uint8_t attention_pass = 0;  // a fused attention kernel (see LaunchWork)
  bool causal = false;
  int64_t sequence = 0;
  int64_t queries = 0, head_dim = 0, heads = 0;  // (0: not known)
  uint8_t attention_backend = 0;  // (AttentionBackend)
  bool tf32 = false;
  bool convolution = false;
  bool convolution_backward = false;
  bool convolution_unaligned = false;
  int64_t converted_elements = 0, conversions = 0;  // (KernelTraits)
};
using FlopFormula = std::function<std::optional<MatrixLaunch>(const c10::OperatorHandle& op,
                                                        c10::ArrayRef<c10::IValue> args,
                                                        c10::ArrayRef<c10::IValue> outputs)>;
void set_flop_formula(FlopFormula formula, std::vector<std::string> operator_names);
// The memory class of each reference-path operator that is not elementwise (by name: aten::_softmax).
void set_op_classes(std::unordered_map<std::string, MemoryClass> classes);

// The part's host spends `seconds` besides its operators (the modelled host's share of a
// library's Python, e.g. an optimizer step's per-tensor bookkeeping); nothing with measured host time.
void add_host_time(double seconds);
// This thread ran a line of the program's Python (python/python_lines.cpp counts them while the
// profile prices a line): the host pays the profile's host_python_line for it at its next operator.
// Lines inside an operator are simhpu's own way of running it, not the program's.
void count_python_line();
// The host pays now for this thread's lines not yet paid for: the program hands over to code that is not
// its own (the autograd engine, whose work may run on another thread, or simhpu), so what it ran so far
// comes before whatever that code launches, on whichever thread.
void pay_python_lines();

// A call the part's library runs as kernels of its own (cuDNN's recurrent layers), where simhpu
// runs ATen's composite of many operators for it. While one is open on a thread, that thread's
// launches are not the part's (neither their device time nor their host launches count). When it
// closes, its forward kernels are timed on `stream`; its backward kernels when the autograd engine
// first runs a node the call recorded (its sequence numbers, on this thread), and the nodes it
// recorded then cost the host `backward_nodes`, the nodes the part's own call records (cuDNN's RNN:
// one). Not on a part whose host runs each kernel before the next (a CPU profile): it runs the
// composite itself.
struct LibraryKernel {
  const char* name;  // (a literal: the timeline keeps the pointer)
  LaunchWork work;
  KernelTraits traits;
};
class LibraryCall {
 public:
  LibraryCall(c10::Stream stream, std::vector<LibraryKernel> forward, std::vector<LibraryKernel> backward,
              int backward_nodes = 1);
  ~LibraryCall();
  LibraryCall(const LibraryCall&) = delete;
  LibraryCall& operator=(const LibraryCall&) = delete;

 private:
  bool open_ = false;
  c10::Stream stream_;
  uint64_t first_node_ = 0;
  std::vector<LibraryKernel> forward_, backward_;
  int backward_nodes_ = 1;
};

// Simulated seconds.
double host_now();
double stream_now(const c10::Stream& stream);
// When the device's streams finish what was launched on them so far.
double device_now(c10::DeviceIndex device);

// One launch on the simulated timeline.
struct Entry {
  const char* op;
  const char* kernel;
  LaunchSite site;  // where Python launched it
  c10::DeviceIndex device;
  c10::StreamId stream;
  Work work;
  Bound bound;
  CollectiveKind collective;
  int ranks;
  c10::ScalarType dtype;  // what its FLOPs were priced for (Undefined: no FLOPs)
  double flops, bytes, peak_fraction;
  double launched, start, end;  // simulated seconds
  // What the start waited for: the stream's previous work, an event (another
  // stream), the host's launch or a joined peer (joined_clocks.h); `after` is
  // the entry that ended then (-1: the host or a peer).
  enum class Cause : uint8_t { Stream, Event, Host, Peer } cause;
  int64_t after;
};

// A reader (a report, a trace) gets the entries of launches made between its
// mark and stop_log; entries are numbered from the first ever logged. A deque: the
// log grows without copying what it holds, and a reader frees what it has read as it
// goes (a step of a large job logs hundreds of thousands).
uint64_t start_log();
std::deque<Entry> stop_log(uint64_t mark);

} // namespace simhpu::simclock
