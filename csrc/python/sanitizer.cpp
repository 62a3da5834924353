#include "python/sanitizer.h"

#include "chaos/chaos_scheduler.h"
#include "sanitizer/stream_sanitizer.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace simhpu {

void bind_sanitizer(py::module_& m) {
  m.def("_sanitizer_set_mode", [](int mode) {
    TORCH_CHECK(mode >= 0 && mode <= 2, "sanitizer mode must be 0 (off), 1 (raise) or 2 (record), got ", mode);
    sanitizer::set_mode(static_cast<sanitizer::Mode>(mode));
  });
  m.def("_sanitizer_mode", [] { return static_cast<int>(sanitizer::mode()); });
  m.def("_sanitizer_set_poison", &sanitizer::set_poison);
  m.def("_sanitizer_poison", &sanitizer::poison);
  m.def("_sanitizer_reports", &sanitizer::reports);
  m.def("_sanitizer_clear_reports", &sanitizer::clear_reports);
  m.def("_chaos_seed", &chaos::seed);
  m.def("_set_chaos_seed", &chaos::set_seed);
  m.def("_chaos_draws", [] {
    py::list out;
    for (const chaos::Draw& d : chaos::draws()) {
      out.append(py::make_tuple(d.device, d.stream, d.launch, d.after_idle, d.held, d.microseconds));
    }
    return out;
  });}

} // namespace simhpu
