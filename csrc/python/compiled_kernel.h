#pragma once
// torch_simhpu._C._CompiledKernel: launching Inductor's generated kernels (compiled_kernel.cpp).
#include <torch/csrc/utils/pybind.h>

namespace simhpu {

void bind_compiled_kernels(pybind11::module_& m);

} // namespace simhpu
