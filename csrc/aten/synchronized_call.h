#pragma once
// The synchronised route of the reference path: for calls whose outputs cannot
// be known before the data is (nonzero, unique, .item()), whose meta kernel
// cannot answer, or that must draw from the CPU's generator. The host waits for
// the current stream, then runs the CPU kernel itself, over aliases of the
// device memory; written arguments go through CPU copies the kernel may resize.
#include "aten/reference_op.h"

#include <ATen/core/stack.h>

namespace simhpu {

void run_synchronized(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first, c10::Device device);

} // namespace simhpu
