#pragma once
#include <pybind11/pybind11.h>

namespace simhpu {
// torch_simhpu._C's simulated-time surface (torch_simhpu/simulation.py uses it).
void bind_simclock(pybind11::module_& m);
} // namespace simhpu
