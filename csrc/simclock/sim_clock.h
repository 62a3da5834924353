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
// launch time per kernel, plus (unless modelled) the program's own time between
// operators, and jumps to the device's when the host waits for a stream, the
// device or an event. The program's own time is the launching thread's CPU time
// outside aten operators: simhpu's dispatch is not the part's, and what the
// thread spends blocked waiting for the CPU workers that stand in for the part
// is not the host's.
//
// The runtime tells it about launches (LaunchSlot::commit), host waits and
// destroyed events; launchers that know better than the record what a launch
// does (the reference path's FLOP formulas, copies over the host link,
// collectives) say so first with hint(). Off, each hook is one relaxed load.
#include "runtime/launch_record.h"
#include "simclock/device_profile.h"
#include "simclock/launch_cost.h"
#include "simclock/launch_hint.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace simhpu::simclock {

enum class HostTime : int { Measured = 0, Modelled = 1 };

// Turns simulated time on with `profile` (clocks start at zero), or off.
void set_profile(std::optional<DeviceProfile> profile);
std::optional<DeviceProfile> profile();
void set_host_time(HostTime mode);
HostTime host_time_mode();

// The launch path: `record` is about to be queued on `stream`. `in_graph`: it
// is being captured into a graph (timed when the graph is replayed).
void on_launch(const LaunchRecord& record, const c10::Stream& stream, bool in_graph);

// For reference-path operators: counts an operator's FLOPs (set from Python,
// from torch.utils.flop_counter's formulas) for the operators named.
using FlopFormula = std::function<std::optional<double>(const c10::OperatorHandle& op,
                                                        c10::ArrayRef<c10::IValue> args,
                                                        c10::ArrayRef<c10::IValue> outputs)>;
void set_flop_formula(FlopFormula formula, std::vector<std::string> operator_names);
// Hints a matrix launch when `op` has a FLOP formula (called before the launch).
void hint_reference_op(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                       c10::ArrayRef<c10::IValue> outputs);

// The host waited for everything queued so far on the stream / device / up to
// the event's last record.
// `began`: the thread's CPU time when it started waiting (wait_begins());
// what it spent waiting for the CPU workers is not host time on the part.
double thread_cpu_seconds();
inline double wait_begins() {
  return enabled() ? thread_cpu_seconds() : 0.0;
}
void on_host_waited_for_stream(const c10::Stream& stream, double began);
void on_host_waited_for_device(c10::DeviceIndex device, double began);
void on_host_waited_for_event(const void* event, double began);
// The host itself moved `bytes` over the host link (a blocking copy it makes).
void on_host_transfer(double bytes, bool pageable);
void on_event_destroyed(const void* event);

// Simulated seconds: when the event's last record was reached; null if it was
// not recorded while simulated time was on.
std::optional<double> event_time(const void* event);
double host_now();
double stream_now(const c10::Stream& stream);

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
  double flops, bytes, peak_fraction;
  double launched, start, end;  // simulated seconds
  // What the start waited for: the stream's previous work, an event (another
  // stream) or the host's launch; `after` is the entry that ended then (-1: the host).
  enum class Cause : uint8_t { Stream, Event, Host } cause;
  int64_t after;
};

// A reader (a report, a trace) gets the entries of launches made between its
// mark and stop_log; entries are numbered from the first ever logged.
uint64_t start_log();
std::vector<Entry> stop_log(uint64_t mark);

} // namespace simhpu::simclock
