#pragma once
// torch_simhpu._C's graph-capture and cluster functions (graphs.cpp).
#include <torch/csrc/utils/pybind.h>

namespace simhpu {

void bind_graphs(pybind11::module_& m);

} // namespace simhpu
