#include "simclock/sim_clock.h"

#include "simclock/joined_clocks.h"

#include "runtime/capture.h"
#include "runtime/launch_queue.h"
#include "runtime/observers.h"
#include "runtime/own_work.h"

#include <ATen/Parallel.h>
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace simhpu::simclock {

namespace detail {
std::atomic<bool> on{false};
} // namespace detail

namespace {

struct StreamClock {
  double time = 0;
  int64_t last = -1;        // the entry that ended at `time` (-1: none, or the host)
  bool set_by_event = false;  // `time` came from an event another stream recorded
  bool set_by_peer = false;   // `time` came from a joined process (joined_clocks.h)
};

struct EventTime {
  double time = 0;
  int64_t entry = -1;
};

struct State {
  std::mutex mu;
  std::optional<DeviceProfile> profile;
  HostTime host_mode = HostTime::Modelled;
  double host = 0;
  uint64_t epoch = 0;  // bumped when the clocks restart: threads' CPU-time marks from before are stale
  std::unordered_map<uint64_t, StreamClock> streams;
  std::unordered_map<const void*, EventTime> events;
  // What launches captured into graphs do, by captured record (timed at replay).
  std::unordered_map<const LaunchRecord*, LaunchWork> captured;
  std::unordered_map<const LaunchRecord*, KernelTraits> captured_traits;
  // Point-to-point transfers with their other end in a joined process, from
  // their launch to their completion (joined_clocks.h), by (group, peer, sends, call).
  struct Transfer {
    double ready, seconds;
    uint64_t stream;
  };
  std::map<std::tuple<uint64_t, int, bool, uint64_t>, Transfer> transfers;
  int64_t next_entry = 0;
  int readers = 0;
  uint64_t first_logged = 0;  // the entry number of log[0]
  std::deque<Entry> log;
  FlopFormula formula;
  std::unordered_set<std::string> formula_ops;
  std::unordered_map<std::string, MemoryClass> op_classes;  // operators not elementwise, by name without overload
  // Library calls whose backward the engine has not reached yet (LibraryCall), oldest first.
  struct LibraryBackward {
    uint64_t thread, first_node, end_node;  // the autograd nodes it recorded: [first, end) on `thread`
    c10::DeviceIndex device;
    std::vector<LibraryKernel> kernels;
    int nodes = 1;  // the autograd nodes the part's own call records
    bool timed = false;
  };
  std::deque<LibraryBackward> library_backwards;
};

State& state() {
  static State* s = new State();  // never destroyed: launches may come during exit
  return *s;
}

uint64_t key_of(const c10::Stream& stream) {
  return (static_cast<uint64_t>(static_cast<uint8_t>(stream.device_index())) << 56) |
         (static_cast<uint64_t>(stream.id()) & ((uint64_t(1) << 56) - 1));
}

// Whether the host's time is measured (a profile set, host_time "measured"):
// otherwise nothing reads the thread's CPU clock, a system call per read.
std::atomic<bool> measuring{false};

double thread_cpu_seconds() {
  if (!measuring.load(std::memory_order_relaxed)) return 0.0;
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// This thread's CPU time at its last hook, and the epoch that was in.
thread_local double last_cpu = 0;
thread_local uint64_t last_epoch = ~uint64_t(0);
// How deep this thread is in aten operators: inside one, the host's time on the
// part is the profile's launch overhead per launch, not what simhpu's own
// dispatch (meta kernels, the reference path) takes here.
thread_local int op_depth = 0;
// What the part's libraries would run for this thread's next launch (a matrix
// operator's attention backend, TF32, convolution), from describe_reference_op.
thread_local std::optional<KernelTraits> next_traits;
// A _foreach_ operator the device runs tensor by tensor, where the part's library
// (CUDA's multi-tensor apply) launches a few kernels for the whole list: its
// per-tensor launches are priced as parts of those kernels (no fixed time and no
// host launch each), and the kernels' own fixed and host times are added when it ends.
struct MultiTensorOp {
  bool active = false;
  std::vector<int64_t> numels;  // the tensors its launches covered
  int depth = 1;                // the lists a launch touched (inputs and outputs)
  uint64_t stream = 0;
};
thread_local MultiTensorOp multi_tensor_op;
// Whether this thread is one of the program's host threads: one that has launched
// on the device (the program's threads, autograd's device thread). Other threads
// run operators too (gloo's worker runs simccl's transfers on CPU views of device
// memory) and stand in for the part's communication, not its host. An operator a
// thread runs before its first launch is counted at that launch, in its epoch.
thread_local bool host_thread = false;
thread_local int operators_before_first_launch = 0;
thread_local int autograd_nodes_before_first_launch = 0;
thread_local uint64_t operators_epoch = ~uint64_t(0);

// What a thread did before its first launch, in this epoch: counted at that launch.
void begin_counting_before_first_launch(uint64_t epoch) {
  if (operators_epoch != epoch) {
    operators_before_first_launch = 0;
    autograd_nodes_before_first_launch = 0;
  }
  operators_epoch = epoch;
}
// Open library calls on this thread (LibraryCall), and whether the autograd node the engine evaluates
// is one of theirs: what it launches meanwhile is not the part's, the sums of its outputs into the next
// nodes' inputs included (a weight's gradients over the time steps: the library's kernels summed them).
thread_local int library_calls_open = 0;
thread_local bool in_library_node = false;
// The engine began evaluating a node whose dispatch is not paid yet (see on_operator_start).
thread_local bool node_dispatch_pending = false;

// Lines of the program's Python this thread ran that the host has not paid for yet.
thread_local uint64_t python_lines_unpaid = 0;

// This thread's CPU time when it began its current wait for the device: what
// it spends waiting for the CPU workers is not host time on the part.
thread_local double wait_began = 0;

// The host's clock up to `cpu_now`: the CPU time this thread spent since its
// last hook, outside operators.
void advance_host(State& s, double cpu_now) {
  if (s.host_mode == HostTime::Measured && last_epoch == s.epoch && op_depth == 0) {
    s.host += std::max(0.0, cpu_now - last_cpu);
  }
  if (s.host_mode == HostTime::Modelled && python_lines_unpaid > 0) {
    s.host += static_cast<double>(python_lines_unpaid) * s.profile->host_python_line;
  }
  python_lines_unpaid = 0;
  last_cpu = cpu_now;
  last_epoch = s.epoch;
}

// (Kernels run CPU operators too, on the workers or, blocking, on the launching
// thread, and in their parallel regions' threads: the part's work, not the host's.)
bool kernel_thread() {
  return on_launch_worker() || running_kernel() || at::in_parallel_region();
}

// The autograd engine evaluates a node of the graph: the part's host pays the engine's
// bookkeeping for it (and for recording it in the forward), besides the node's operators.
// (A node autograd's device thread evaluates before that thread's first launch is counted at the
// launch, as its operators are: whether the thread had launched yet depends on how the kernels ran.)
void on_autograd_node(State& s) {
  if (!s.profile || kernel_thread()) return;
  if (host_thread) {
    s.host += s.profile->host_autograd_overhead;
    return;
  }
  begin_counting_before_first_launch(s.epoch);
  ++autograd_nodes_before_first_launch;
}

void time_record(State& s, const LaunchRecord& record, const c10::Stream& stream, double host,
                 const LaunchWork* work, KernelTraits traits);

// This thread launches on the device: from now on it is one of the program's host threads, and
// pays for what it did before its first launch in this epoch.
void become_host_thread(State& s) {
  if (host_thread) return;
  host_thread = true;
  if (operators_epoch == s.epoch) {
    s.host += operators_before_first_launch * s.profile->host_op_overhead +
              autograd_nodes_before_first_launch * s.profile->host_autograd_overhead;
  }
  operators_before_first_launch = 0;
  autograd_nodes_before_first_launch = 0;
}

// The library's kernels on `stream`, each launched by the host in turn.
void time_library_kernels(State& s, const std::vector<LibraryKernel>& kernels, const c10::Stream& stream) {
  become_host_thread(s);
  for (const LibraryKernel& kernel : kernels) {
    LaunchRecord record;
    record.op_name = kernel.name;
    s.host += s.profile->host_launch_overhead;
    time_record(s, record, stream, s.host, &kernel.work, kernel.traits);
  }
  if (s.profile->synchronous_launches) s.host = std::max(s.host, s.streams[key_of(stream)].time);
}

// The library call whose backward `node` (of the forward on `thread`) is part of, if any. The engine
// evaluates a thread's nodes latest first, so a call whose backward was timed is done once a node from
// before it runs: it is forgotten then.
State::LibraryBackward* library_backward_of(State& s, uint64_t thread, int64_t node) {
  if (node < 0 || s.library_backwards.empty()) return nullptr;
  const auto number = static_cast<uint64_t>(node);
  std::erase_if(s.library_backwards, [&](const State::LibraryBackward& call) {
    return call.timed && call.thread == thread && number < call.first_node;
  });
  for (auto call = s.library_backwards.rbegin(); call != s.library_backwards.rend(); ++call) {
    if (call->thread == thread && call->first_node <= number && number < call->end_node) return &*call;
  }
  return nullptr;
}

// The engine reached a library call's backward: the host pays the part's nodes for it and launches its
// kernels on the stream the engine runs it on.
void time_library_backward(State& s, State::LibraryBackward& call) {
  call.timed = true;
  for (int node = 0; node < call.nodes; ++node) on_autograd_node(s);
  const c10::Stream stream =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getStream(c10::Device(c10::DeviceType::PrivateUse1, call.device));
  time_library_kernels(s, call.kernels, stream);
}

// The host dispatches a top-level operator (or the engine evaluates a node): the profile's time for it.
void pay_operator_dispatch(State& s) {
  if (host_thread) {
    advance_host(s, thread_cpu_seconds());
    s.host += s.profile->host_op_overhead;
  } else {
    begin_counting_before_first_launch(s.epoch);
    ++operators_before_first_launch;
  }
}

// The autograd engine's span around evaluating a node: the node, then the sums of its outputs into
// the next nodes' inputs.
bool is_node_evaluation(const char* name) {
  static constexpr char kPrefix[] = "autograd::engine::evaluate_function: ";
  return std::strncmp(name, kPrefix, sizeof(kPrefix) - 1) == 0;
}

std::unique_ptr<at::ObserverContext> on_operator_start(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.profile || kernel_thread()) return nullptr;
    State::LibraryBackward* call = library_backward_of(s, fn.forwardThreadId(), fn.seqNr());
    in_library_node = call != nullptr;
    const bool evaluation_unpaid = std::exchange(node_dispatch_pending, false);
    if (call && call->timed) return nullptr;  // (another of the nodes the library's backward stands for)
    if (evaluation_unpaid) pay_operator_dispatch(s);
    if (call) {
      time_library_backward(s, *call);
    } else {
      on_autograd_node(s);
    }
    return nullptr;
  }
  if (kernel_thread()) return nullptr;
  if (op_depth++ == 0) {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    --op_depth;  // (the program's own time up to here counts)
    if (s.profile && s.profile->multi_tensor.enabled && std::strncmp(fn.name(), "aten::_foreach_", 15) == 0) {
      multi_tensor_op = MultiTensorOp{true};
    }
    if (s.profile) {
      // (a node's evaluation is paid when the node says whose it is: a library call's nodes but one are free)
      if (is_node_evaluation(fn.name())) {
        node_dispatch_pending = true;
      } else {
        pay_operator_dispatch(s);
      }
    }
    ++op_depth;
  }
  return nullptr;
}

// A _foreach_ operator's end: the part's kernels for its lists, their fixed time on
// the stream its launches went to and their launches on the host.
void end_multi_tensor_op() {
  MultiTensorOp op = std::move(multi_tensor_op);
  multi_tensor_op = MultiTensorOp{};
  if (op.numels.empty()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.profile) return;
  const DeviceProfile& p = *s.profile;
  const double kernels = static_cast<double>(multi_tensor_kernels(op.numels, op.depth, p.multi_tensor));
  const ClassCost& cost = p.memory_classes[static_cast<size_t>(MemoryClass::MultiTensor)];
  s.host += (kernels - 1) * p.host_launch_overhead;  // (the first was launched with its first tensor)
  s.streams[op.stream].time += kernels * std::max(cost.floor, p.kernel_overhead);
  if (p.synchronous_launches) s.host = std::max(s.host, s.streams[op.stream].time);
}

void on_operator_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION || kernel_thread()) return;
  if (op_depth > 0 && --op_depth == 0) {
    in_library_node = false;  // (its evaluation ended, the sums into the next nodes' inputs with it)
    if (std::exchange(node_dispatch_pending, false)) {
      State& s = state();
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.profile) pay_operator_dispatch(s);
    }
    if (multi_tensor_op.active) end_multi_tensor_op();
    last_cpu = thread_cpu_seconds();
  }
}

// Operator boundaries, while simulated time is on (RecordFunction's global callbacks).
std::optional<at::CallbackHandle> operator_callbacks;

void host_waits_until(State& s, double device_time) {
  advance_host(s, wait_began);
  s.host = std::max(s.host, device_time) + s.profile->sync_latency;
  last_cpu = thread_cpu_seconds();  // what waiting took is not the host's time
}

// A point-to-point transfer with a joined peer ends once both ends were ready and
// it has moved its bytes; the stream that waits for its completion (`clock`) and
// the one it was started on move there.
void complete_transfer(State& s, const LaunchWork& c, const LaunchRecord& record, StreamClock& clock) {
  auto it = s.transfers.find({c.group, c.peer, c.sends, c.call_index});
  if (it == s.transfers.end()) return;  // (not a joined transfer)
  const State::Transfer transfer = it->second;
  s.transfers.erase(it);
  const double end = std::max(transfer.ready, joined::peer_ready(record.op_name, c)) + transfer.seconds;
  StreamClock& started_on = s.streams[transfer.stream];
  if (end > started_on.time) started_on = StreamClock{end, -1, false, true};
  if (end > clock.time) clock = StreamClock{end, -1, false, true};
}

// Times one record (kernel or marker) launched at host time `host` on `stream`.
void time_record(State& s, const LaunchRecord& record, const c10::Stream& stream, double host,
                 const LaunchWork* work, KernelTraits traits = {}) {
  const DeviceProfile& p = *s.profile;
  StreamClock& clock = s.streams[key_of(stream)];
  const double ready = host + p.launch_latency;
  switch (record.kind) {
    case LaunchRecord::Kind::RecordEvent: {
      const bool after_work = clock.time >= ready;
      clock.time = std::max(clock.time, ready);
      if (!after_work) clock.last = -1;
      s.events[record.event.get()] = EventTime{clock.time, clock.last};
      return;
    }
    case LaunchRecord::Kind::WaitEvent: {
      auto it = s.events.find(record.event.get());
      if (it != s.events.end() && it->second.time > clock.time) {
        clock = StreamClock{it->second.time, it->second.entry, true};
      }
      return;
    }
    case LaunchRecord::Kind::Hold:  // (not timed: see on_launch)
      return;
    case LaunchRecord::Kind::Kernel:
      break;
  }
  LaunchWork c = work != nullptr ? *work : LaunchWork{};
  complete_from_record(c, traits, record, p);
  // (the host launches each of the kernels the launch stands for: a multi-tensor apply's chunks)
  s.host += static_cast<double>(std::max<int64_t>(traits.kernels, 1) - 1) * p.host_launch_overhead;
  if (c.completes) {
    complete_transfer(s, c, record, clock);
  }
  const Timing timing = time_of(c, p, traits);
  const bool host_bound = ready > clock.time;
  double start = std::max(clock.time, ready);
  const double own_start = start;
  bool transfer_started = false;
  if (c.work == Work::Collective && joined::active() && joined::joined_call(c)) {
    if (c.collective == CollectiveKind::PointToPoint) {
      // It runs once the other end is ready too: its completion places it (complete_transfer).
      joined::transfer_ready(c, start);
      s.transfers[{c.group, c.peer, c.sends, c.call_index}] = State::Transfer{start, timing.seconds, key_of(stream)};
      transfer_started = true;
    } else {
      start = joined::collective_start(record.op_name, c, start);
    }
  }
  const bool peer_bound = start > own_start || (!host_bound && clock.set_by_peer);
  const Entry::Cause cause = peer_bound ? Entry::Cause::Peer
                             : host_bound ? Entry::Cause::Host
                             : clock.set_by_event ? Entry::Cause::Event : Entry::Cause::Stream;
  const int64_t id = s.next_entry++;
  if (s.readers > 0) {
    s.log.push_back(Entry{record.op_name, record.kernel != nullptr ? record.kernel->name : "",
                          record.site, stream.device_index(), stream.id(), c.work,
                          timing.bound, c.collective, c.ranks, c.dtype, c.flops, c.bytes, timing.peak_fraction, host, start,
                          start + timing.seconds, cause, host_bound || peer_bound ? -1 : clock.last});
  }
  // (A marker passes a peer's delay on to the kernel after it, which is what waited.)
  clock = StreamClock{transfer_started ? start : start + timing.seconds, id, false,
                      peer_bound && c.work == Work::Marker};
}

void on_launch(const LaunchRecord& record, const c10::Stream& stream, const LaunchWork* work, bool in_graph);
void describe_reference_op(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                           c10::ArrayRef<c10::IValue> outputs);
void on_host_waited_for_stream(const c10::Stream& stream);
void on_host_waited_for_device(c10::DeviceIndex device);
void on_host_waited_for_event(const void* event);
void on_host_transfer(double bytes, bool pageable);
void on_event_destroyed(const void* event);
std::optional<double> elapsed_seconds(const void* start, const void* end);

// What the runtime shows simulated time; active while a profile is set.
class SimClockLens final : public RuntimeObserver {
 public:
  SimClockLens() { observers::subscribe(this); }
  void on_launch(LaunchRecord& record, const c10::Stream& stream, const LaunchWork* work, bool in_graph) override {
    simclock::on_launch(record, stream, work, in_graph);
  }
  void on_reference_op(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                       c10::ArrayRef<c10::IValue> outputs) override {
    describe_reference_op(op, args, outputs);
  }
  void on_host_wait_begins() override { wait_began = thread_cpu_seconds(); }
  void on_host_waited_for_stream(const c10::Stream& stream) override { simclock::on_host_waited_for_stream(stream); }
  void on_host_waited_for_device(c10::DeviceIndex device) override { simclock::on_host_waited_for_device(device); }
  void on_host_waited_for_event(const void* event) override { simclock::on_host_waited_for_event(event); }
  void on_host_transfer(double bytes, bool pageable) override { simclock::on_host_transfer(bytes, pageable); }
  void on_event_destroyed(const void* event) override { simclock::on_event_destroyed(event); }
  std::optional<double> elapsed_seconds(const void* start, const void* end) override {
    return simclock::elapsed_seconds(start, end);
  }
};

SimClockLens& lens() {
  static SimClockLens* instance = new SimClockLens();  // never destroyed, as the state
  return *instance;
}
const bool lens_subscribed = (lens(), true);

} // namespace

void set_profile(std::optional<DeviceProfile> profile) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.profile = std::move(profile);
  s.host = 0;
  python_lines_unpaid = 0;  // (the thread that restarts the clocks is the one whose lines are counted)
  ++s.epoch;
  if (s.profile && !operator_callbacks) {
    operator_callbacks = at::addGlobalCallback(
        at::RecordFunctionCallback(&on_operator_start, &on_operator_end)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  } else if (!s.profile && operator_callbacks) {
    at::removeCallback(*operator_callbacks);
    operator_callbacks.reset();
  }
  s.streams.clear();
  s.events.clear();
  s.captured.clear();
  s.captured_traits.clear();
  s.transfers.clear();
  s.library_backwards.clear();
  detail::on.store(s.profile.has_value());
  measuring.store(s.profile.has_value() && s.host_mode == HostTime::Measured);
  observers::set_active(&lens(), s.profile.has_value());
}

std::optional<DeviceProfile> profile() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.profile;
}

void set_host_time(HostTime mode) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.host_mode != mode) ++s.epoch;  // (CPU-time marks taken before are stale)
  s.host_mode = mode;
  measuring.store(s.profile.has_value() && s.host_mode == HostTime::Measured);
}

HostTime host_time_mode() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.host_mode;
}

namespace {

bool has_tensor_list(const LaunchRecord& record) {
  for (const KernelArg& arg : record.args) {
    if (std::holds_alternative<std::vector<DeviceTensor>>(arg)) return true;
  }
  return false;
}

void note_multi_tensor_launch(const LaunchRecord& record, const c10::Stream& stream) {
  int64_t largest = 0;
  int tensors = 0;
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg); t && t->dim() > 0 && t->same_as < 0) {
      largest = std::max(largest, t->numel());
      ++tensors;
    }
  }
  multi_tensor_op.numels.push_back(largest);
  multi_tensor_op.depth = std::max(multi_tensor_op.depth, tensors);
  multi_tensor_op.stream = key_of(stream);
}

// A launch's memory class by its operator's name (aten::sum.IntList_out: aten::sum's).
MemoryClass class_of(const State& s, const char* op_name) {
  if (s.op_classes.empty() || op_name == nullptr) return MemoryClass::Elementwise;
  thread_local std::string name;  // (reused: no allocation a launch)
  const char* dot = std::strchr(op_name, '.');
  name.assign(op_name, dot ? static_cast<size_t>(dot - op_name) : std::strlen(op_name));
  auto it = s.op_classes.find(name);
  return it == s.op_classes.end() ? MemoryClass::Elementwise : it->second;
}

void on_launch(const LaunchRecord& record, const c10::Stream& stream, const LaunchWork* work, bool in_graph) {
  // A hold is simhpu's own bookkeeping (memory kept until its stream passes), made
  // only when the CPU workers happen to be behind: nothing the part would launch.
  if (record.kind == LaunchRecord::Kind::Hold) return;
  // Nor is what simhpu launches to fit a reference kernel to the part's operator (runtime/own_work.h).
  if (own_work()) {
    next_traits.reset();
    return;
  }
  // Inside an operator the host's time is the profile's per launch, and the
  // operator's end marks the thread's CPU time again: no need to read it here
  // (a system call, the largest part of what simulated time costs a launch).
  const bool in_operator = op_depth > 0;
  const double now = in_operator ? 0.0 : thread_cpu_seconds();
  KernelTraits traits = next_traits.value_or(KernelTraits{});
  const bool described = next_traits.has_value();
  next_traits.reset();
  if ((library_calls_open > 0 || in_library_node) && !in_graph) return;  // (the library's kernels stand for it)
  const bool part_of_multi_tensor = multi_tensor_op.active && in_operator && !in_graph &&
                                    record.kind == LaunchRecord::Kind::Kernel && !has_tensor_list(record);
  // (the host launches the part's first kernel before it runs; the others, counted at the op's end)
  const bool launches_a_kernel = !part_of_multi_tensor || multi_tensor_op.numels.empty();
  if (part_of_multi_tensor) {
    traits.memory_class = MemoryClass::MultiTensor;
    traits.kernels = 0;
    note_multi_tensor_launch(record, stream);
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.profile) return;
  if (!described && !part_of_multi_tensor) traits.memory_class = class_of(s, record.op_name);
  if (in_graph) {
    if (work != nullptr) s.captured[&record] = *work;
    s.captured_traits[&record] = traits;
    return;
  }
  become_host_thread(s);
  if (in_operator) {
    last_epoch = s.epoch;
  } else {
    advance_host(s, now);
  }
  if (cluster_launched_by(record) || (work != nullptr && work->work == Work::KernelArgument)) {
    return;  // a cluster's launches were timed as they were collected; an argument is no launch on the part
  }
  if (launches_a_kernel) s.host += s.profile->host_launch_overhead;
  // (the part's operator makes a strided operand contiguous first: an operator and a launch more)
  if (const int copies = copies_made_contiguous(traits.memory_class, record).count; copies > 0) {
    s.host += copies * (s.profile->host_op_overhead + s.profile->host_launch_overhead);
  }
  if (traits.convolution) {
    s.host += traits.convolution_backward ? s.profile->host_convolution_backward_overhead
                                          : s.profile->host_convolution_overhead;
  }
  if (const LaunchSequence* graph = graph_replayed_by(record)) {
    // A replay: its kernels go to the device back to back, launched at once.
    for (const LaunchRecord& r : graph->records) {
      auto it = s.captured.find(&r);
      auto traits_it = s.captured_traits.find(&r);
      time_record(s, r, stream, s.host, it == s.captured.end() ? nullptr : &it->second,
                  traits_it == s.captured_traits.end() ? KernelTraits{} : traits_it->second);
    }
  } else {
    time_record(s, record, stream, s.host, work, traits);
  }
  if (s.profile->synchronous_launches) s.host = std::max(s.host, s.streams[key_of(stream)].time);
  if (!in_operator) last_cpu = thread_cpu_seconds();  // the simulator's own time is not the host's
}

// A matrix launch, when `op` has a FLOP formula.
void describe_reference_op(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                       c10::ArrayRef<c10::IValue> outputs) {
  FlopFormula formula;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.formula || s.formula_ops.count(op.operator_name().name) == 0) return;
    formula = s.formula;
  }
  if (std::optional<MatrixLaunch> matrix = formula(op, args, outputs)) {
    LaunchWork work;
    work.work = Work::Matrix;
    work.flops = matrix->flops;
    work.gemm_batch = matrix->batch;
    work.gemm_m = matrix->m;
    work.gemm_n = matrix->n;
    work.gemm_k = matrix->k;
    work.attention_pass = matrix->attention_pass;
    work.attention_causal = matrix->causal;
    work.attention_sequence = matrix->sequence;
    work.attention_queries = matrix->queries;
    work.attention_head_dim = matrix->head_dim;
    work.attention_heads = matrix->heads;
    // (the kernel simhpu runs has the keys repeated per query head: its operator says the group)
    if (work.attention_pass != 0) work.attention_group = take_next_attention_group();
    describe_next_launch(work);
    next_traits = KernelTraits{};
    next_traits->attention_backend = static_cast<AttentionBackend>(matrix->attention_backend);
    next_traits->tf32 = matrix->tf32;
    next_traits->convolution = matrix->convolution;
    next_traits->convolution_backward = matrix->convolution_backward;
    next_traits->convolution_unaligned = matrix->convolution_unaligned;
    next_traits->converted_elements = matrix->converted_elements;
    next_traits->conversions = matrix->conversions;
  }
}

void on_host_waited_for_stream(const c10::Stream& stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.profile) return;
  host_waits_until(s, s.streams[key_of(stream)].time);
}

void on_host_waited_for_device(c10::DeviceIndex device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.profile) return;
  double latest = 0;
  for (const auto& [key, clock] : s.streams) {
    if (static_cast<c10::DeviceIndex>(static_cast<int8_t>(key >> 56)) == device) latest = std::max(latest, clock.time);
  }
  host_waits_until(s, latest);
}

void on_host_waited_for_event(const void* event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.profile) return;
  auto it = s.events.find(event);
  host_waits_until(s, it == s.events.end() ? 0.0 : it->second.time);
}

void on_host_transfer(double bytes, bool pageable) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.profile) return;
  advance_host(s, thread_cpu_seconds());
  LaunchWork cost;
  cost.work = Work::DeviceToHost;
  cost.bytes = bytes;
  cost.pageable = pageable;
  s.host += time_of(cost, *s.profile).seconds;
}

void on_event_destroyed(const void* event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.erase(event);
}

// The modelled part's time between the events' last records.
std::optional<double> elapsed_seconds(const void* start, const void* end) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.profile) return std::nullopt;
  auto from = s.events.find(start), to = s.events.find(end);
  TORCH_CHECK(from != s.events.end() && to != s.events.end(),
              "elapsed_time: simulated time is on (a device profile is set) but ",
              from != s.events.end() ? "the end" : "the start",
              " event was recorded before it was turned on; record both events after set_profile()/simulate()");
  return to->second.time - from->second.time;
}

} // namespace

void set_flop_formula(FlopFormula formula, std::vector<std::string> operator_names) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.formula = std::move(formula);
  s.formula_ops = std::unordered_set<std::string>(operator_names.begin(), operator_names.end());
}

void set_op_classes(std::unordered_map<std::string, MemoryClass> classes) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.op_classes = std::move(classes);
}

void add_host_time(double seconds) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.profile || s.host_mode != HostTime::Modelled) return;  // (measured: the program's own time is counted)
  s.host += std::max(0.0, seconds);
}

// (at most this many library calls wait for their backward: one the program never took the backward of
// is forgotten once this many came after it)
constexpr size_t kLibraryBackwardsKept = 4096;

LibraryCall::LibraryCall(c10::Stream stream, std::vector<LibraryKernel> forward, std::vector<LibraryKernel> backward,
                         int backward_nodes)
    : stream_(stream), forward_(std::move(forward)), backward_(std::move(backward)), backward_nodes_(backward_nodes) {
  // (a call inside an open one, or inside a library node's backward, is part of what that one stands for)
  if (!enabled() || kernel_thread() || library_calls_open > 0 || in_library_node) return;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.profile || s.profile->synchronous_launches) return;
  }
  open_ = true;
  first_node_ = at::sequence_number::peek();
  ++library_calls_open;
}

LibraryCall::~LibraryCall() {
  if (!open_) return;
  --library_calls_open;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.profile) return;
  time_library_kernels(s, forward_, stream_);
  const uint64_t end_node = at::sequence_number::peek();
  if (!backward_.empty() && end_node > first_node_) {
    s.library_backwards.push_back(State::LibraryBackward{at::RecordFunction::currentThreadId(), first_node_, end_node,
                                                         stream_.device_index(), std::move(backward_),
                                                         backward_nodes_});
    if (s.library_backwards.size() > kLibraryBackwardsKept) s.library_backwards.pop_front();
  }
}

void count_python_line() {
  if (op_depth == 0) ++python_lines_unpaid;
}

void pay_python_lines() {
  if (python_lines_unpaid == 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.profile && host_thread) {
    advance_host(s, thread_cpu_seconds());
  }
}

double host_now() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.profile) advance_host(s, thread_cpu_seconds());
  return s.host;
}

double stream_now(const c10::Stream& stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.streams.find(key_of(stream));
  return it == s.streams.end() ? 0.0 : it->second.time;
}

double device_now(c10::DeviceIndex device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  double latest = 0;
  for (const auto& [key, clock] : s.streams) {
    if (static_cast<c10::DeviceIndex>(static_cast<int8_t>(key >> 56)) == device) latest = std::max(latest, clock.time);
  }
  return latest;
}

uint64_t start_log() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.readers++ == 0) {
    s.log.clear();
    s.first_logged = static_cast<uint64_t>(s.next_entry);
  }
  return static_cast<uint64_t>(s.next_entry);
}

std::deque<Entry> stop_log(uint64_t mark) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const uint64_t skip = mark > s.first_logged ? mark - s.first_logged : 0;
  const bool last_reader = s.readers > 0 && --s.readers == 0;
  std::deque<Entry> mine;
  if (last_reader) {  // (the log is this reader's alone: handed over, not copied)
    mine = std::exchange(s.log, {});
    mine.erase(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(std::min<uint64_t>(skip, mine.size())));
  } else if (skip < s.log.size()) {
    mine.assign(s.log.begin() + static_cast<std::ptrdiff_t>(skip), s.log.end());
  }
  return mine;
}

} // namespace simhpu::simclock
