#include "aten/stub_launch.h"

#include "aten/op_routes.h"
#include "runtime/device_memory.h"
#include "runtime/launch_site.h"
#include "runtime/streams.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace simhpu::stubs {
namespace {

// The iterator's dtype for the kernel: its common dtype where it computed one
// (elementwise ops), else the first output's.
c10::ScalarType compute_dtype(const at::TensorIteratorBase& iter, ComputeDtype compute) {
  if (compute == ComputeDtype::Common && iter.ninputs() > 0) {
    try {
      return iter.common_dtype();
    } catch (const c10::Error&) {
      // (a config that does not compute one: promote the inputs as ATen would)
    }
    c10::ScalarType promoted = iter.dtype(iter.noutputs());
    for (int i = iter.noutputs() + 1; i < iter.ntensors(); ++i) promoted = c10::promoteTypes(promoted, iter.dtype(i));
    return promoted;
  }
  return iter.dtype(0);
}

// Operand `i` as the kernel sees it. An elementwise kernel takes each tensor
// as it is (inputs broadcast against the output as elementwise() does), so the
// launch names the tensors the program has; a reduction takes them over the
// iterator's shape, where the output's stride 0 marks the reduced dimensions
// (innermost last: ATen keeps it first).
DeviceTensor describe_operand(const at::TensorIteratorBase& iter, int i, c10::DeviceIndex device,
                              ComputeDtype compute) {
  if (compute == ComputeDtype::Common) {
    const at::TensorBase& t = iter.tensor_base(i);
    DeviceTensor d;
    d.data = t.is_privateuseone() ? host_address(device, t.data_ptr()) : t.data_ptr();
    d.dtype = t.scalar_type();
    d.sizes.assign(t.sizes().begin(), t.sizes().end());
    d.strides.assign(t.strides().begin(), t.strides().end());
    d.storage_offset = t.storage_offset();
    return d;
  }
  DeviceTensor d;
  const at::TensorBase& t = iter.tensor_base(i);
  void* data = iter.data_ptr(i);
  d.data = t.is_privateuseone() ? host_address(device, data) : data;
  d.dtype = iter.dtype(i);
  const int64_t item = static_cast<int64_t>(iter.element_size(i));
  const auto shape = iter.shape();
  const auto strides = iter.strides(i);
  for (int64_t dim = static_cast<int64_t>(shape.size()) - 1; dim >= 0; --dim) {
    d.sizes.push_back(shape[dim]);
    d.strides.push_back(strides[dim] / item);
  }
  return d;
}

} // namespace

void launch_iterator(const char* op, const char* stub, at::TensorIteratorBase& iter, const KernelDef& kernel,
                     int operands, ComputeDtype compute, std::initializer_list<c10::Scalar> scalars) {
  TORCH_CHECK(iter.ntensors() == operands, op, ": ATen called ", stub, " with ", iter.ntensors(),
              " operands, but its op_plugin_functions.yaml entry's kernel takes ", operands,
              " (outputs, then the inputs); this torch's kernel for the op differs from the one the entry was "
              "written for");
  count_route(op, Route::Dedicated);
  if (iter.numel() == 0) {
    return;
  }
  const c10::Device device = iter.device(0);
  TORCH_CHECK(device.is_privateuseone(), op, ": ", stub, " reached the simhpu kernel for an output on ", device);
  const c10::DeviceGuard guard(device);
  const LaunchSite site = capture_launch_site();  // before the slot: it may take the GIL
  LaunchSlot slot(device.index());
  LaunchRecord& record = slot.record();
  record.kernel = &kernel;
  record.op_name = op;
  record.site = site;
  record.args.emplace_back(compute_dtype(iter, compute));
  record.args.emplace_back(static_cast<int64_t>(iter.noutputs()));
  for (int i = 0; i < iter.ntensors(); ++i) {
    DeviceTensor d = describe_operand(iter, i, device.index(), compute);
    d.storage_slot = static_cast<int32_t>(record.keep_alive.size());
    record.keep_alive.push_back(iter.tensor_base(i).storage());
    if (i < iter.noutputs()) {
      record.mark_written(d.storage_slot);
    }
    record.args.emplace_back(std::move(d));
  }
  for (const c10::Scalar& s : scalars) {
    record.args.emplace_back(s);
  }
  slot.commit();
}

IteratorOperands::IteratorOperands(const KernelArgs& args, int outputs, int inputs)
    : args_(args), outputs_(outputs), count_(outputs + inputs), dtype_(std::get<c10::ScalarType>(args[0])) {
  for (int i = 0; i < count_; ++i) {
    const auto& given = std::get<DeviceTensor>(args[2 + i]);
    if (given.dtype == dtype_) {
      operands_.push_back(given);
      continue;
    }
    // Another dtype: the kernel works on a copy in the compute dtype.
    at::Tensor temporary = i < outputs ? at::empty(given.sizes, at::TensorOptions(dtype_))
                                       : given.cpu_view().to(dtype_).contiguous();
    if (i < outputs) written_back_.emplace_back(i, temporary);
    operands_.push_back(describe_tensor(temporary));
    temporaries_.push_back(std::move(temporary));
  }
}

const c10::Scalar& IteratorOperands::scalar(int i) const {
  return std::get<c10::Scalar>(args_[2 + count_ + i]);
}

void IteratorOperands::finish() {
  for (const auto& [i, temporary] : written_back_) {
    std::get<DeviceTensor>(args_[2 + i]).cpu_view().copy_(temporary);
  }
}

} // namespace simhpu::stubs
