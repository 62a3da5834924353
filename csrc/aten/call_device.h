#pragma once
// The device an operator call runs on, by CUDA's rules.
#include "aten/reference_op.h"

#include <ATen/core/stack.h>

namespace simhpu {

// Every tensor must be on one simhpu device, except CPU scalars (0-dim, not
// written) and CPU index tensors in a Tensor?[] (copied to the device, as
// CUDA does; rewritten in place on the stack). A call with no simhpu tensor
// runs on the simhpu device it names (factory functions). Anything else raises
// "Expected all tensors to be on the same device", naming the argument and the op.
c10::Device call_device(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first);

} // namespace simhpu
