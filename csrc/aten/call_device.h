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

// Advanced indexing follows `self`: a call whose self is a CPU tensor and whose
// only simhpu tensors are its indices (a Tensor?[]) runs on the CPU, the indices
// read back first, as ATen's AdvancedIndex moves indices to self's device (CUDA
// takes `cpu_tensor[cuda_index]`, so the part must). Returns whether it ran.
bool ran_where_self_is(const c10::OperatorHandle& op, const ReferenceOp& ref, torch::jit::Stack* stack, size_t first);

} // namespace simhpu
