// Graph capture and compiled-graph clusters from Python (runtime/capture.h):
// torch_simhpu/graphs.py and torch_simhpu/_inductor build on these.
#include "python/graphs.h"

#include "python/launch_site.h"

#include "runtime/capture.h"
#include "runtime/device.h"
#include "runtime/kernel_registry.h"
#include "runtime/streams.h"

#include <torch/csrc/utils/pybind.h>

#include <memory>

namespace simhpu {
namespace {

namespace py = pybind11;

// What one capture recorded; replay queues it on the current stream of the
// device it was captured on, as one record.
class CapturedLaunches {
 public:
  CapturedLaunches(std::shared_ptr<const LaunchSequence> sequence, c10::DeviceIndex device)
      : sequence_(std::move(sequence)), device_(device) {}

  void replay() const {
    if (!sequence_->records.empty()) {
      launch_sequence(current_stream(device_), sequence_, CaptureKind::Graph);
    }
  }
  size_t kernel_count() const { return sequence_->kernel_count(); }

 private:
  std::shared_ptr<const LaunchSequence> sequence_;
  c10::DeviceIndex device_;
};

// `count` launches of a kernel that does nothing, on the current stream (captured while capturing).
void launch_empty_kernels(int64_t count) {
  const KernelDef& empty = find_kernel("empty_kernel");
  const c10::Stream stream = current_stream(current_device());
  for (int64_t i = 0; i < count; ++i) {
    LaunchSlot slot(stream);
    slot.record().kernel = &empty;
    slot.record().op_name = "_launch_empty_kernels";
    slot.commit();
  }
}

} // namespace

void bind_graphs(py::module_& m) {
  py::class_<CapturedLaunches>(m, "_CapturedLaunches")
      .def("replay", &CapturedLaunches::replay)
      .def_property_readonly("kernel_count", &CapturedLaunches::kernel_count);
  m.def("_begin_graph_capture", &begin_graph_capture);
  m.def("_end_graph_capture", [] {
    const c10::DeviceIndex device = current_device();
    return CapturedLaunches(end_graph_capture(), device);
  });
  m.def("_capturing_graph", &capturing_graph);
  m.def("_begin_cluster", [](int64_t device) {
    check_device_index(device, "compiled graph");
    return begin_cluster(static_cast<c10::DeviceIndex>(device));
  });
  m.def("_end_cluster", &end_cluster);
  m.def("_launch_empty_kernels", &launch_empty_kernels);
  m.def("_map_compiled_sources", &map_compiled_sources);
}

} // namespace simhpu
