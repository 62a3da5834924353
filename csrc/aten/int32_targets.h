#pragma once
// Class targets as the part takes them. Ascend's loss kernels (nll_loss,
// nll_loss2d, multilabel_margin_loss, forward and backward) take an int32
// target where the CPU's want int64. With this setting on, such an int32
// target is widened to int64 before the call's meta kernel and its CPU kernel
// see it; the values, and so the results, are the same. Off by default: simhpu
// then answers as the CPU does and refuses what it refuses. A front end
// standing for a part that takes them (torch_npu's) turns it on.
#include "aten/reference_op.h"

#include <ATen/core/stack.h>

namespace simhpu {

void set_int32_targets(bool enabled);
bool int32_targets();

// Whether the operator (its name without overload, "aten::nll_loss_forward") is one of them. Their
// functional forms take the reference path too (prefer_cpu_kernels_over_composites): ATen's composite
// for them runs the meta kernel, which refuses int32, before the path could widen it.
bool takes_int32_target(const std::string& name);

// Replaces an int32 `target` argument of the stack's call by its int64 copy
// when the setting is on and the operator is one of the losses above.
void widen_int32_target(const ReferenceOp& ref, torch::jit::Stack& stack, size_t first);

} // namespace simhpu
