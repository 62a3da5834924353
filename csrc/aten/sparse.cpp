// Sparse tensors on simhpu: COO (SparsePrivateUse1) and the compressed layouts
// CSR/CSC/BSR/BSC (SparseCsrPrivateUse1).
//
// A sparse tensor's structure (sizes, which dimensions are sparse, whether it is
// coalesced) lives in its impl on the host; its indices and values are ordinary
// dense device tensors. Operators that only build or read that structure are
// registered for the sparse keys with ATen's own device-generic kernels. Every
// other operator on a sparse tensor runs on the reference path, synchronised
// (how many entries a sparse result has is known only once it is computed): its
// operands are copied to the CPU, the CPU's sparse kernel runs, and the results
// are copied back, written arguments into the tensors the caller holds.
#include "aten/sparse.h"

#include "aten/op_routes.h"
#include "aten/reference_op.h"

#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/core/List.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_compressed_tensor_unsafe.h>
#include <ATen/ops/_sparse_coo_tensor_unsafe.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace simhpu {

namespace {

// (ATen's own accessor is not among the headers torch installs.)
at::SparseTensorImpl* coo_impl(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(t.layout() == at::kSparse);
  return static_cast<at::SparseTensorImpl*>(t.unsafeGetTensorImpl());
}

} // namespace

bool is_sparse_layout(const at::Tensor& t) {
  return t.defined() && t.layout() != at::kStrided;
}

at::Tensor sparse_to_device(const at::Tensor& host, c10::Device device) {
  if (host.layout() == at::kSparse) {
    const auto* impl = coo_impl(host);
    return at::_sparse_coo_tensor_unsafe(impl->indices().to(device), impl->values().to(device), host.sizes(),
                                         host.options().device(device), host.is_coalesced());
  }
  const auto* impl = at::sparse_csr::get_sparse_csr_impl(host);
  return at::_sparse_compressed_tensor_unsafe(impl->compressed_indices().to(device), impl->plain_indices().to(device),
                                              impl->values().to(device), host.sizes(), host.options().device(device));
}

namespace {

bool on_device(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

at::Tensor tensor_to_host(const at::Tensor& t) {
  if (!on_device(t)) return t;
  const c10::Device cpu(c10::kCPU);
  if (t.layout() == at::kStrided) {
    at::Tensor host = t.cpu();
    // Some CPU kernels keep what their backward needs only for operands that
    // require grad (_sparse_mm_reduce_impl's argmax indices); the copy, made below
    // autograd, would otherwise hand them none, and the backward then reads past
    // an empty tensor. Autograd stays excluded here, so nothing is recorded.
    if (t.requires_grad()) host.set_requires_grad(true);
    return host;
  }
  if (t.layout() == at::kSparse) {
    const auto* impl = coo_impl(t);
    return at::_sparse_coo_tensor_unsafe(impl->indices().cpu(), impl->values().cpu(), t.sizes(),
                                         t.options().device(cpu), t.is_coalesced());
  }
  const auto* impl = at::sparse_csr::get_sparse_csr_impl(t);
  return at::_sparse_compressed_tensor_unsafe(impl->compressed_indices().cpu(), impl->plain_indices().cpu(),
                                              impl->values().cpu(), t.sizes(), t.options().device(cpu));
}

at::Tensor tensor_to_device(const at::Tensor& t, c10::Device device) {
  if (!t.defined() || t.device().type() != c10::kCPU) return t;
  return t.layout() == at::kStrided ? t.to(device) : sparse_to_device(t, device);
}

// Each operand as the CPU kernel takes it; `device` learns the simhpu device.
c10::IValue to_host(const c10::IValue& v, std::optional<c10::Device>& device) {
  if (v.isTensor()) {
    if (on_device(v.toTensor()) && !device) device = v.toTensor().device();
    return tensor_to_host(v.toTensor());
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorVector()) {
      if (on_device(t) && !device) device = t.device();
      list.push_back(tensor_to_host(t));
    }
    return list;
  }
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
    if (!device) device = v.toDevice();
    return c10::Device(c10::kCPU);
  }
  return v;
}

c10::IValue to_device(const c10::IValue& v, c10::Device device) {
  if (v.isTensor()) return tensor_to_device(v.toTensor(), device);
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorVector()) list.push_back(tensor_to_device(t, device));
    return list;
  }
  return v;
}

// `target` (which the caller holds) takes `source`'s contents, on target's
// device and in its dtype: a written argument after the CPU kernel ran, or a copy.
void write_back(const at::Tensor& target, const at::Tensor& source) {
  const c10::Device device = target.device();
  if (target.layout() == at::kStrided) {
    if (target.sizes() != source.sizes()) target.resize_(source.sizes());
    target.copy_(source);
    return;
  }
  TORCH_CHECK(target.layout() == source.layout(), "simhpu: cannot write a tensor of layout ", source.layout(),
              " into one of layout ", target.layout());
  auto values = [&](const at::Tensor& v) { return v.to(device, target.scalar_type()); };
  if (target.layout() == at::kSparse) {
    auto* impl = coo_impl(target);
    const auto* from = coo_impl(source);
    impl->raw_resize_(source.sparse_dim(), source.dense_dim(), source.sizes());
    impl->set_indices_and_values_unsafe(from->indices().to(device), values(from->values()));
    impl->set_coalesced(source.is_coalesced());
    return;
  }
  const auto* from = at::sparse_csr::get_sparse_csr_impl(source);
  at::sparse_csr::get_sparse_csr_impl(target)->set_member_tensors(
      from->compressed_indices().to(device), from->plain_indices().to(device), values(from->values()),
      source.sym_sizes());
}

// copy_ between devices, where one side is a sparse simhpu tensor (ATen has no
// CPU kernel for it: it is the device backends' own hook).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  write_back(dst, self);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  write_back(dst, self);  // sparse structure is resized as it is written
  return dst;
}

// ATen's constructors make the new impl's placeholder indices on the current
// device (as CUDA's generated wrappers guard it): the tensor's device must be current.
at::Tensor coo_with_dims_and_tensors(int64_t sparse_dim, int64_t dense_dim, c10::SymIntArrayRef size,
                                     const at::Tensor& indices, const at::Tensor& values,
                                     std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                                     std::optional<at::Device> device, std::optional<bool> pin_memory,
                                     std::optional<bool> is_coalesced) {
  const c10::OptionalDeviceGuard guard(device ? device : std::optional<at::Device>(values.device()));
  return at::native::new_with_dims_and_tensor_sparse_symint(sparse_dim, dense_dim, size, indices, values, dtype,
                                                            layout, device, pin_memory, is_coalesced);
}

at::Tensor coo_with_dims(int64_t sparse_dim, int64_t dense_dim, at::IntArrayRef size,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  const c10::OptionalDeviceGuard guard(device);
  return at::native::new_with_dims_sparse(sparse_dim, dense_dim, size, dtype, layout, device, pin_memory);
}

template <at::Tensor (*make)(c10::SymIntArrayRef, std::optional<at::ScalarType>, std::optional<at::Layout>,
                             std::optional<at::Device>, std::optional<bool>, std::optional<at::MemoryFormat>)>
at::Tensor empty_on_device(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                           std::optional<at::Layout> layout, std::optional<at::Device> device,
                           std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  const c10::OptionalDeviceGuard guard(device);
  return make(size, dtype, layout, device, pin_memory, memory_format);
}

template <at::Tensor (*make)(const at::Tensor&, std::optional<at::ScalarType>, std::optional<at::Layout>,
                             std::optional<at::Device>, std::optional<bool>, std::optional<at::MemoryFormat>)>
at::Tensor empty_like_on_device(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                                std::optional<at::Layout> layout, std::optional<at::Device> device,
                                std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  const c10::OptionalDeviceGuard guard(device ? device : std::optional<at::Device>(self.device()));
  return make(self, dtype, layout, device, pin_memory, memory_format);
}

} // namespace

void sparse_reference_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const ReferenceOp& ref = reference_op(op);
  const size_t first = stack->size() - ref.num_args();
  const std::vector<c10::IValue> originals(stack->begin() + first, stack->end());
  std::optional<c10::Device> device;
  for (size_t i = first; i < stack->size(); ++i) {
    (*stack)[i] = to_host((*stack)[i], device);
  }
  TORCH_CHECK(device.has_value(), "simhpu: ", ref.name, " reached the sparse simhpu kernel without a simhpu operand");
  const c10::DeviceGuard guard(*device);
  const std::vector<c10::IValue> host_args(stack->begin() + first, stack->end());
  try {
    op.callBoxed(stack);  // the operands are CPU tensors now: the CPU's kernel
  } catch (c10::Error& e) {
    e.add_context("simhpu: while running " + ref.name + " on the reference path (sparse operands)");
    throw;
  }
  for (size_t i = 0; i < originals.size(); ++i) {
    if (ref.arg_written[i] && originals[i].isTensor() && on_device(originals[i].toTensor())) {
      write_back(originals[i].toTensor(), host_args[i].toTensor());
    }
  }
  const size_t returns = stack->size() - first;
  for (size_t r = 0; r < returns; ++r) {
    c10::IValue& result = (*stack)[first + r];
    // In-place and out= forms return the caller's tensor. A result that only
    // shares memory with an operand (_sparse_broadcast_to) comes back as a copy:
    // the CPU's aliasing cannot reach the device tensors.
    const int aliased = r < ref.return_alias.size() ? ref.return_alias[r] : -1;
    result = aliased >= 0 && ref.arg_written[aliased] ? originals[aliased] : to_device(result, *device);
  }
  count_route(ref.name.c_str(), Route::Synchronized);
}

// What reads or builds a sparse tensor's structure: ATen's kernels work for any device.
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(coo_with_dims));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(coo_with_dims_and_tensors));
  m.impl("empty.memory_format", TORCH_FN(empty_on_device<&at::native::empty_sparse_symint>));
  m.impl("empty_like", TORCH_FN(empty_like_on_device<&at::native::empty_like_sparse_coo>));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("empty.memory_format", TORCH_FN(empty_on_device<&at::native::empty_sparse_compressed_symint>));
  m.impl("empty_like", TORCH_FN(empty_like_on_device<&at::native::empty_like_sparse_csr>));
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_reference_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_reference_fallback>());
}

} // namespace simhpu
