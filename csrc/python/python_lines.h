#pragma once
#include <pybind11/pybind11.h>

namespace simhpu {
// torch_simhpu._C's count of the program's Python lines (torch_simhpu/simulation/python_lines.py uses it).
void bind_python_lines(pybind11::module_& m);
} // namespace simhpu
