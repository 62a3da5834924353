#pragma once
// torch_simhpu._C's stream-sanitizer functions (torch_simhpu/sanitizer.py).
#include <torch/csrc/utils/pybind.h>

namespace simhpu {

void bind_sanitizer(pybind11::module_& m);

} // namespace simhpu
