#pragma once
// torch_simhpu._C's process-group backend class (distributed.cpp).
#include <torch/csrc/utils/pybind.h>

namespace simhpu {

void bind_distributed(pybind11::module_& m);

} // namespace simhpu
