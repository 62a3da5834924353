#pragma once
// Reduced precision computed at float32. Accelerators compute a half or
// bfloat16 operator at float32 and round its results once (Ascend's AI cores,
// CUDA's opmath); the CPU's kernels round at every step of some operators
// (addmm rounds the product before adding) and have no reduced-precision kernel
// for others (avg_pool3d, cdist, add_relu). With this setting on, a reference
// call over tensors of one reduced dtype runs the CPU kernel on float32 copies
// and rounds its results to that dtype. Off by default: simhpu then answers as
// the CPU does, and refuses what it refuses. A front end standing for a part
// that computes so (torch_npu's) turns it on.
#include "aten/reference_op.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <string>
#include <utility>
#include <vector>

namespace simhpu {

void set_reduced_precision_in_float32(bool enabled);
bool reduced_precision_in_float32();

// One call's promotion: the constructor replaces the stack's reduced-precision
// tensors by float32 copies when the call qualifies (the setting is on; every
// floating tensor with dimensions has the one reduced dtype; it names no dtype and
// draws no random numbers; no written tensor overlaps another argument);
// otherwise it leaves the stack as is. A softmax of half into float32
// (half_to_float) gets its input as float32 instead, with nothing to round;
// its backward into a half gradient (input_dtype half) is computed as float32's
// and rounded into it.
class FloatPromotion {
 public:
  FloatPromotion(const ReferenceOp& ref, torch::jit::Stack& stack);

  bool active() const { return reduced_ != c10::ScalarType::Undefined; }
  c10::ScalarType reduced() const { return reduced_; }

  // After the kernel: what it wrote into a copy, written into the tensor the
  // copy stood for (resized first where that tensor can be: a host copy).
  void write_back() const;

  // The synchronised path's results, whose dtypes no meta kernel announced: a
  // float32 result is rounded to the reduced dtype (a promoted call names no dtype).
  void round_results(torch::jit::Stack& results, size_t count) const;

 private:
  const std::string* op_name_;
  c10::ScalarType reduced_ = c10::ScalarType::Undefined;
  std::vector<std::pair<at::Tensor, at::Tensor>> written_;  // (original, its float32 copy)
};

} // namespace simhpu
