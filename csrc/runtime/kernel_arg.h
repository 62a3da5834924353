#pragma once
// What a device kernel receives: plain descriptors of tensors and values. A
// launch record holds these, never at::Tensor, so kernels run without touching
// the dispatcher or reference counts of the host-side tensor objects.
#include "runtime/device_memory.h"
#include "runtime/pinned_memory.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Scalar.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace simhpu {

struct DeviceTensor {
  void* data = nullptr;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // Undefined: an absent optional tensor
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> strides;
  // Where the tensor sits in its storage: the launch record's keep_alive slot
  // (-1: not recorded) and the offset in elements. Reference kernels rebuild
  // the aliasing between arguments from these (see aten/reference_call.h).
  int64_t storage_offset = 0;
  int32_t storage_slot = -1;
  // For reference kernels: the position of the first descriptor of the same
  // tensor in the record (-1: none earlier), so one tensor passed twice stays one.
  int32_t same_as = -1;
  bool conj = false;  // lazily conjugated / negated views (Tensor.conj(), _neg_view)
  bool neg = false;

  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t size(int64_t d) const { return sizes[d < 0 ? d + dim() : d]; }
  int64_t stride(int64_t d) const { return strides[d < 0 ? d + dim() : d]; }
  int64_t numel() const;
  bool is_contiguous() const;

  template <typename T>
  T* data_as() const { return static_cast<T*>(data); }

  // The same memory seen as a CPU tensor, for kernels that reuse ATen's CPU
  // routines. Only valid while the kernel runs.
  at::Tensor cpu_view() const;
};

// An optional tensor argument that was None.
struct NoneArg {};

using KernelArg = std::variant<
    NoneArg,
    DeviceTensor,
    std::vector<DeviceTensor>,
    int64_t,
    double,
    bool,
    c10::Scalar,
    std::vector<int64_t>,
    c10::ScalarType,
    std::string,
    c10::IValue>;  // anything else a reference kernel (aten/reference_call.h) is given as is

using KernelArgs = c10::SmallVector<KernelArg, 6>;

// The descriptor of a tensor's memory as a kernel sees it: device tensors are
// reached through their device's host view (see device_memory.h), pinned host
// tensors through the kernels' view of their block (see pinned_memory.h).
inline DeviceTensor describe_tensor(const at::Tensor& t) {
  DeviceTensor d;
  if (t.is_privateuseone()) {
    d.data = host_address(t.device().index(), t.data_ptr());
  } else if (const c10::DataPtr& memory = t.storage().data_ptr(); is_pinned_data(memory)) {
    d.data = pinned_kernel_address(memory, t.data_ptr());
  } else {
    d.data = t.data_ptr();
  }
  d.dtype = t.scalar_type();
  d.sizes.assign(t.sizes().begin(), t.sizes().end());
  d.strides.assign(t.strides().begin(), t.strides().end());
  d.storage_offset = t.storage_offset();
  d.conj = t.is_conj();
  d.neg = t.is_neg();
  return d;
}

} // namespace simhpu
