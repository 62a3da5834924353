#pragma once
#include <pybind11/pybind11.h>

namespace simhpu {
// torch_simhpu._C's phantom-execution surface (torch_simhpu/simulation.py uses it).
void bind_phantom(pybind11::module_& m);
} // namespace simhpu
