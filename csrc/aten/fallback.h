#pragma once
#include <ATen/core/dispatch/Dispatcher.h>

namespace simhpu {

// The PrivateUse1 fallback: an aten operator with no dedicated kernel runs on
// the reference path, ATen's CPU kernel as a device kernel (see
// reference_call.h). The launching thread works out the outputs' shapes with
// the operator's meta kernel, allocates them on the device and returns; the
// stream's worker runs the kernel. View operators become device views; ops
// whose output shape depends on data, or that have no meta kernel, wait for
// the device and run at once (counted as synchronized, see op_routes.h).
void reference_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The same, always on the synchronised route: the CPU kernel runs in the
// calling thread, so the call's errors are raised at once, exactly as the CPU
// raises them (for calls an adapter's own checks refused).
void reference_fallback_synchronized(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Sends the ops that have both a CPU kernel and a composite kernel for other
// backends to the reference path (called once, when the module loads).
void prefer_cpu_kernels_over_composites();

} // namespace simhpu
