#include "runtime/kernel_arg.h"

#include <ATen/ops/from_blob.h>

namespace simhpu {

int64_t DeviceTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) {
    n *= s;
  }
  return n;
}

bool DeviceTensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != expected) {
      return false;
    }
    expected *= sizes[d];
  }
  return true;
}

at::Tensor DeviceTensor::cpu_view() const {
  at::Tensor view = at::from_blob(data, sizes, strides, at::TensorOptions().dtype(dtype).device(at::kCPU));
  view._set_conj(conj);
  view._set_neg(neg);
  return view;
}

} // namespace simhpu
