// torch_simhpu._C: the runtime's Python surface and the generated npu_* bindings.
#include "aten/exec_cmd.h"
#include "aten/op_routes.h"
#include "aten/int32_targets.h"
#include "aten/reduced_precision.h"
#include "aten/reference_op.h"
#include "aten/result_placement.h"
#include "custom_op/custom_op.h"
#include "op_plugin_dialect/entries.h"
#include "python/compiled_kernel.h"
#include "python/distributed.h"
#include "python/graphs.h"
#include "python/launch_site.h"
#include "python/memory_history.h"
#include "python/phantom.h"
#include "python/python_lines.h"
#include "python/sanitizer.h"
#include "python/simclock.h"
#include "runtime/device.h"
#include "runtime/device_memory.h"
#include "runtime/fork_guard.h"
#include "runtime/generator.h"
#include "runtime/kernel_registry.h"
#include "runtime/launch_work.h"
#include "runtime/observers.h"
#include "runtime/streams.h"
#include "trace/kernel_trace.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/utils/pybind.h>

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace simhpu {

// Launches the always-failing diagnostic kernel on `t`'s device (tests only).
void _launch_failing_kernel(const at::Tensor& t) {
  const c10::DeviceGuard guard(t.device());
  EXEC_CMD(fail_on_device, t);
}

// Occupies `t`'s device (on the current stream) for a while (tests only); `t`
// only names the device: the kernel neither reads nor writes it.
void _sleep_on_device(const at::Tensor& t, int64_t microseconds) {
  const c10::DeviceGuard guard(t.device());
  if (observers::watched()) {  // on the part too, the kernel takes that long
    LaunchWork cost;
    cost.seconds = static_cast<double>(microseconds) * 1e-6;
    describe_next_launch(cost);
  }
  EXEC_CMD(sleep_on_device, microseconds);
}

// The ATen thread-local state kernels on `t`'s current stream run under (tests only).
void _report_worker_state(const at::Tensor& t) {
  const c10::DeviceGuard guard(t.device());
  EXEC_CMD(report_worker_state, written(t));
}

// Queue throughput: seconds to launch `count` times a kernel that does nothing
// and takes no arguments, on the current stream, and drain them. Fills slots
// directly (no Python, no dispatcher, no launch-site capture): this measures
// the launch queue alone (benchmarks/run.py).
double _time_empty_launches(int64_t count) {
  pybind11::gil_scoped_release no_gil;
  const KernelDef& empty = find_kernel("empty_kernel");
  const c10::Stream stream = current_stream(current_device());
  synchronize_stream(stream);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < count; ++i) {
    LaunchSlot slot(stream);
    slot.record().kernel = &empty;
    slot.record().op_name = "_time_empty_launches";
    slot.commit();
  }
  synchronize_stream(stream);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What a launch record's trip between cores costs on this machine: two threads
// pinned to CPUs `a` and `b` pass a counter back and forth `rounds` times; the
// result is nanoseconds per one-way hand-off (benchmarks record it beside the
// launch rows, whose cost it bounds). Refused if either CPU cannot be pinned.
double _core_to_core_latency_ns(int a, int b, int64_t rounds) {
  pybind11::gil_scoped_release no_gil;
  const auto pin = [](int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
  };
  alignas(64) std::atomic<int64_t> turn{0};
  std::atomic<bool> pinned{true};
  std::thread peer([&] {
    if (!pin(b)) {
      pinned = false;
      return;
    }
    for (int64_t i = 1; i < 2 * rounds; i += 2) {
      while (turn.load(std::memory_order_acquire) != i) {}
      turn.store(i + 1, std::memory_order_release);
    }
  });
  cpu_set_t before;
  pthread_getaffinity_np(pthread_self(), sizeof(before), &before);
  const bool here = pin(a);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < 2 * rounds && pinned; i += 2) {
    turn.store(i + 1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != i + 2 && pinned) {}
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  peer.join();
  pthread_setaffinity_np(pthread_self(), sizeof(before), &before);
  TORCH_CHECK(here && pinned, "_core_to_core_latency_ns: cannot pin threads to CPUs ", a, " and ", b);
  return seconds * 1e9 / static_cast<double>(2 * rounds);
}

// torch_simhpu.library's launch. Errors are raised after the call returns, so
// the operator's name must outlive it: names are kept for the process.
void _launch_user_kernel(const std::string& op, const std::string& kernel, const std::vector<at::Tensor>& inputs,
                         const std::vector<at::Tensor>& outputs, const pybind11::bytes& params) {
  custom_op::launch_user_kernel(intern_name(op), kernel, inputs, outputs, std::string(params));
}

// A device index from Python, checked before it is narrowed to c10::DeviceIndex.
c10::DeviceIndex device_arg(int64_t index, const char* who) {
  check_device_index(index, who);
  return static_cast<c10::DeviceIndex>(index);
}

void register_hooks();                                  // aten/privateuse1_hooks.cpp
void prefer_cpu_kernels_over_composites();              // aten/fallback.cpp
void register_generated_ops(pybind11::module_& m);      // generated python_bindings.cpp

} // namespace simhpu

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  simhpu::install_python_launch_sites();
  simhpu::register_hooks();
  // First: an op-plugin entry's simulated ACLNN kernel takes precedence over the plain reference path.
  simhpu::op_plugin::register_simulated_kernels();
  simhpu::prefer_cpu_kernels_over_composites();
  m.def("_op_plugin_kernels", [] {
    // Each op-plugin dialect operator and what serves it on simhpu (torch_simhpu.op_plugin_kernels).
    auto rows = simhpu::op_plugin::simulated_kernel_report();
    for (const std::string& name : simhpu::op_plugin::unprovided_operators()) rows.emplace_back(name, "unprovided");
    return rows;
  });

  m.def("_device_count", [] { return static_cast<int>(simhpu::device_count()); });
  m.def("_current_device", [] { return static_cast<int>(simhpu::current_device()); });
  m.def("_device_of_pointer", [](uintptr_t ptr) {
    const at::Device device =
        at::detail::getPrivateUse1Hooks().getDeviceFromPtr(reinterpret_cast<void*>(ptr));
    return static_cast<int>(device.index());
  });
  m.def("_check_device_index", [](int64_t index, const std::string& who) {
    simhpu::check_device_index(index, who.c_str());
  });
  m.def("_set_device", [](int64_t index) { simhpu::set_device(simhpu::device_arg(index, "set_device")); });
  m.def("_synchronize", [](int64_t index) { simhpu::synchronize_device(simhpu::device_arg(index, "synchronize")); });
  m.def("_synchronize_all", &simhpu::synchronize_all_devices);
  m.def("_device_wide_waits", &simhpu::device_wide_waits);
  m.def("_launch_blocking", &simhpu::launch_blocking);
  m.def("_is_in_bad_fork", &simhpu::in_bad_fork);
  m.def("_strict_mode", &simhpu::strict_mode);
  m.def("_set_reduced_precision_in_float32", &simhpu::set_reduced_precision_in_float32);
  m.def("_reduced_precision_in_float32", &simhpu::reduced_precision_in_float32);
  m.def("_set_int32_targets", &simhpu::set_int32_targets);
  m.def("_int32_targets", &simhpu::int32_targets);
  m.def("_memory_limit", &simhpu::memory_limit_bytes);
  m.def("_kernel_names", &simhpu::registered_kernel_names);
  m.def("_meta_known_to_differ", &simhpu::meta_known_to_differ);
  m.def("_default_generator", [](int64_t index) {
    return simhpu::default_generator(simhpu::device_arg(index, "default_generator"));
  });
  m.def("_start_trace", [] {
    const simhpu::TraceMark mark = simhpu::start_trace();
    return py::make_tuple(mark.entry, mark.since_ns);
  });
  m.def("_stop_trace", [](const py::tuple& given) {
    const simhpu::TraceMark mark{given[0].cast<uint64_t>(), given[1].cast<int64_t>()};
    // Waits for what was launched so far; a failure stays for the next synchronising call.
    for (c10::DeviceIndex d = 0; d < simhpu::device_count(); ++d) simhpu::drain_launches(d);
    py::list out;
    for (const auto& e : simhpu::stop_trace(mark)) {
      out.append(py::make_tuple(e.kernel, e.op, e.file ? py::object(py::str(e.file)) : py::object(py::none()),
                                e.line, static_cast<int>(e.device), static_cast<int64_t>(e.stream),
                                e.queued_ns, e.start_ns, e.end_ns, e.correlation, e.by_host));
    }
    return out;
  });
  m.def("_start_counting_routes", &simhpu::start_counting_routes);
  m.def("_stop_counting_routes", &simhpu::stop_counting_routes);
  m.def("_route_counts", [] {
    py::dict out;
    for (const auto& c : simhpu::route_counts()) {
      out[py::str(c.op)] = py::make_tuple(c.dedicated, c.reference, c.synchronized);
    }
    return out;
  });
  m.def("_set_fallback", [](const std::string& mode, std::vector<std::string> ops) {
    simhpu::set_fallback_policy(simhpu::parse_fallback_mode(mode, "set_fallback"), std::move(ops));
  });
  m.def("_fallback", [] {
    const char* names[] = {"global", "selective", "blocklist"};
    return py::make_tuple(names[static_cast<int>(simhpu::fallback_mode())], simhpu::fallback_ops());
  });
  m.def("_launch_failing_kernel", &simhpu::_launch_failing_kernel);
  m.def("_sleep_on_device", &simhpu::_sleep_on_device);
  m.def("_report_worker_state", &simhpu::_report_worker_state);
  m.def("_time_empty_launches", &simhpu::_time_empty_launches);
  m.def("_core_to_core_latency_ns", &simhpu::_core_to_core_latency_ns);
  m.def("_results_placed", &simhpu::results_placed);
  m.def("_result_placement_available", &simhpu::result_placement_available);
  m.def("_launch_user_kernel", &simhpu::_launch_user_kernel);

  simhpu::bind_graphs(m);
  simhpu::bind_memory_history(m);
  simhpu::bind_sanitizer(m);
  simhpu::bind_simclock(m);
  simhpu::bind_python_lines(m);
  simhpu::bind_phantom(m);
  simhpu::bind_distributed(m);
  simhpu::bind_compiled_kernels(m);
  simhpu::register_generated_ops(m);
}
