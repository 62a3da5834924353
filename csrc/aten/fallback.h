#pragma once
#include <ATen/core/dispatch/Dispatcher.h>

namespace simhpu {

// Runs an operator the device does not implement on the CPU: inputs are copied
// to the host, the CPU kernel runs, results are copied back.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

} // namespace simhpu
