#pragma once
// torch_simhpu._C's memory-history functions (memory_history.cpp).
#include <torch/csrc/utils/pybind.h>

namespace simhpu {

void bind_memory_history(pybind11::module_& m);

} // namespace simhpu
