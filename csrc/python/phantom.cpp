#include "python/phantom.h"

#include "phantom/phantom_execution.h"
#include "runtime/allocator.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace py = pybind11;

namespace simhpu {

void bind_phantom(py::module_& m) {
  m.def(
      "_phantom_set",
      [](bool on, int values, int64_t known_bytes) {
        phantom::set_enabled(on, static_cast<phantom::Values>(values), known_bytes);
      },
      py::arg("on"), py::arg("values"), py::arg("known_bytes") = phantom::kDefaultKnownBytes);
  m.def("_phantom_known_launches", &phantom::known_launches);
  m.def("_phantom_peer_answers", &phantom::peer_answers);
  m.def("_phantom_forget_values", [](const at::Tensor& t) { phantom::forget_values(t); });
  m.def("_phantom_set_routing", [](int kind, double exponent, std::vector<double> weights, std::string setting) {
    phantom::set_routing(phantom::Routing{static_cast<phantom::Routing::Kind>(kind), exponent, std::move(weights),
                                          std::move(setting)});
  });
  m.def("_phantom_routed_histograms", &phantom::routed_histograms);
  m.def("_phantom_enabled", &phantom::enabled);
  m.def("_phantom_host_reads", [] {
    py::list out;
    for (const phantom::HostRead& r : phantom::host_reads()) {
      out.append(py::make_tuple(r.op, r.file, r.line, r.count, r.bytes));
    }
    return out;
  });
  m.def("_phantom_clear_host_reads", &phantom::clear_host_reads);
  m.def("_set_device_capacity", &set_device_capacity);
  // The host heap's free pages back to the system: glibc keeps what the program freed, scattered
  // over its arenas, for reuse. A phantom rank of a large job (one of sixteen processes on this
  // machine) then holds what it uses, not its high-water mark (torch_simhpu/host_memory.py calls it
  // each second, without the GIL). False where the C library has no such call.
  m.def("_release_free_host_memory", [] {
#if defined(__GLIBC__)
    malloc_trim(0);
    return true;
#else
    return false;
#endif
  }, py::call_guard<py::gil_scoped_release>());
}

} // namespace simhpu
