#pragma once
// A reference call: an aten operator's CPU kernel run as a device kernel. The
// launching thread encodes the call into a launch record (tensor descriptors
// that remember which storage each tensor lives in, everything else as is);
// the stream's worker rebuilds the arguments as CPU tensors over the same
// device memory, one CPU storage per device storage, so aliasing between the
// arguments is exactly what the caller had, and runs the kernel on them.
#include "aten/reference_op.h"
#include "runtime/launch_record.h"

#include <ATen/core/stack.h>

namespace simhpu {

// The kernel every reference call launches (named "reference" in errors and traces).
const KernelDef& reference_kernel();

// Points `record` at the reference kernel for `ref` (before its arguments are encoded).
void begin_reference_record(LaunchRecord& record, const ReferenceOp& ref);

// Encodes the operator's arguments (device tensors, CPU scalars, a Generator
// drawn from the device's generator, ...) into `record`. CPU tensors are
// copied when `snapshot_host_tensors` (a launch that runs later), else passed as they are.
void encode_arguments(LaunchRecord& record, const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args,
                      c10::Device device, bool snapshot_host_tensors = true);

// Encodes the new outputs (allocated on the device by the launching thread)
// the kernel is to fill, in return order.
void encode_outputs(LaunchRecord& record, c10::ArrayRef<c10::IValue> outputs);

// Launches the reference kernel of `ref` for a call whose results are already on the device
// (`results`, in return order; `fresh_outputs`, those it is to fill) on the current stream,
// after telling the observers, then puts the results on `stack` in place of the arguments.
void launch_reference_call(const ReferenceOp& ref, torch::jit::Stack* stack, c10::Device device,
                           std::vector<c10::IValue> results, const std::vector<c10::IValue>& fresh_outputs);

// Runs the CPU kernel over aliases of the record's tensors. With
// `fill_outputs`, the results land in the encoded outputs and nothing is
// returned; without, the CPU results are returned (the synchronised path).
torch::jit::Stack run_reference_call(LaunchRecord& record, bool fill_outputs);

} // namespace simhpu
