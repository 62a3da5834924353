// ProcessGroupSimHPU as a torch._C._distributed_c10d.Backend, so that
// torch.distributed can register it with a ProcessGroup for simhpu tensors.
#include "python/distributed.h"

#include "distributed/process_group.h"

#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace simhpu {

void bind_distributed(pybind11::module_& m) {
  namespace py = pybind11;
  // Backend's Python type is registered by torch; importing makes sure it is.
  py::module_::import("torch._C._distributed_c10d");
  py::class_<ProcessGroupSimHPU, c10d::Backend, c10::intrusive_ptr<ProcessGroupSimHPU>>(m, "_ProcessGroupSimHPU")
      .def(py::init([](const c10::intrusive_ptr<c10d::Backend>& transport, int rank, int size,
                       const std::vector<int64_t>& world_ranks, bool simulated_peers) {
             return c10::make_intrusive<ProcessGroupSimHPU>(transport, rank, size, world_ranks, simulated_peers);
           }),
           py::arg("transport"), py::arg("rank"), py::arg("size"), py::arg("world_ranks") = std::vector<int64_t>{},
           py::arg("simulated_peers") = false,
           "A simccl backend over `transport` (a gloo backend of the same ranks; with simulated peers, "
           "torch's FakeProcessGroup), for the group of `world_ranks`.");
}

} // namespace simhpu
