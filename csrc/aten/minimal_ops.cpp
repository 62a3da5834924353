// The operators PyTorch needs natively from any PrivateUse1 backend: creating
// tensors, views, resizing, copies and reading a scalar. Everything else either
// has a device kernel (op_plugin_functions.yaml) or takes the reference path
// (fallback.h).
#include "aten/exec_cmd.h"
#include "aten/op_routes.h"
#include "aten/resize.h"
#include "runtime/device.h"
#include "runtime/events.h"
#include "runtime/launch_queue.h"
#include "runtime/observers.h"
#include "runtime/pinned_memory.h"
#include "runtime/streams.h"
#include "runtime/undefined_memory.h"

#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace simhpu {
namespace {

constexpr c10::DispatchKeySet kDeviceKeys(c10::DispatchKey::PrivateUse1);

c10::Device checked_device(std::optional<c10::Device> device_opt, const char* op) {
  c10::Device device = c10::device_or_default(device_opt);
  TORCH_CHECK(device.is_privateuseone(), op, ": expected a simhpu device, got ", device);
  if (!device.has_index()) {
    device = device_of(current_device());
  }
  check_device_index(device.index(), op);
  return device;
}

void check_strided_unpinned(std::optional<c10::Layout> layout, std::optional<bool> pin, const char* op) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              op, ": simhpu supports only strided tensors, got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin),
              op, ": pin_memory applies to CPU tensors only");
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device_opt,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  check_strided_unpinned(layout, pin_memory, "empty");
  const c10::DeviceGuard guard(checked_device(device_opt, "empty"));
  return at::detail::empty_generic(
      size, at::GetAllocator(at::kPrivateUse1), kDeviceKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device_opt,
    std::optional<bool> pin_memory) {
  check_strided_unpinned(layout, pin_memory, "empty_strided");
  const c10::DeviceGuard guard(checked_device(device_opt, "empty_strided"));
  return at::detail::empty_strided_generic(
      size, stride, at::GetAllocator(at::kPrivateUse1), kDeviceKeys, c10::dtype_or_default(dtype));
}

at::Tensor as_strided(
    const at::Tensor& self,
    c10::SymIntArrayRef size,
    c10::SymIntArrayRef stride,
    std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset.has_value()) {
    offset = storage_offset->expect_int();
  }
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

const at::Tensor& resize_(
    const at::Tensor& self,
    c10::SymIntArrayRef size_sym,
    std::optional<c10::MemoryFormat> memory_format) {
  const c10::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(size_sym);
  auto* impl = self.unsafeGetTensorImpl();
  // As the CPU does: a tensor already of this size keeps its strides (even a
  // non-contiguous view); only a new size makes it contiguous.
  if (self.sizes() != size) {
    impl->set_sizes_contiguous(size);
  }
  ensure_storage_fits(self);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "resize_: unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage_offset(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().is_privateuseone(),
              "set_: expected a simhpu storage, got one on ", source.device());
  auto* impl = self.unsafeGetTensorImpl();
  if (!self.storage().is_alias_of(source)) {
    impl->set_storage_keep_dtype(std::move(source));
  }
  impl->set_storage_offset(storage_offset);
  if (stride.data() != nullptr) {
    impl->set_sizes_and_strides(size, stride);
  } else {
    impl->set_sizes_contiguous(size);
  }
  ensure_storage_fits(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

// Host-side copies: the device memory involved must not have pending work.
void copy_on_host(const at::Tensor& src, const at::Tensor& dst) {
  auto host_view = [](const at::Tensor& t) {
    return t.is_privateuseone() ? describe_tensor(t).cpu_view() : t;
  };
  host_view(dst).copy_(host_view(src));
}

// One name for the op however it runs, in errors, traces and route counts.
constexpr const char* kCopyFrom = "aten::_copy_from";

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.numel() == 0) {
    return dst;
  }
  const bool src_on_device = self.is_privateuseone();
  const bool dst_on_device = dst.is_privateuseone();
  // The copy kernel sees the two as separate tensors over the same memory, so
  // the overlap checks ATen's CPU copy makes happen here (as CUDA's copy_ does).
  TORCH_CHECK(!dst_on_device || at::has_internal_overlap(dst) != at::MemOverlap::Yes,
              "copy_: the destination has elements that share memory (an expanded tensor?); "
              "copy into a tensor whose elements are distinct, e.g. a clone()");
  TORCH_CHECK(!(src_on_device && dst_on_device) || at::get_overlap_status(dst, self) != at::MemOverlapStatus::Partial,
              "copy_: the source and the destination partly share memory, so the result would depend on the "
              "order elements are copied in; copy from a clone() of the source");
  if (dst_on_device && (!src_on_device || self.device() == dst.device())) {
    // Into the device: a copy kernel, ordered with the other work in the queue.
    // A host source is staged in a private buffer (as CUDA does for pageable
    // memory) so the caller may reuse it at once, unless it is pinned and the
    // copy non_blocking: then the kernel reads it in place, later.
    const c10::DeviceGuard guard(dst.device());
    const bool in_place = src_on_device || (non_blocking && is_pinned(self.data_ptr()));
    if (observers::watched() && !src_on_device) {
      LaunchWork cost;
      // A 0-dim host tensor (a Python number TensorIterator moves to the device
      // for a binary op) is a kernel argument on parts whose kernels take CPU
      // scalars, as CUDA's do: no transfer to price.
      cost.work = self.dim() == 0 ? Work::KernelArgument : Work::HostToDevice;
      cost.bytes = static_cast<double>(self.nbytes());
      cost.pageable = !is_pinned(self.data_ptr());
      describe_next_launch(cost);
    }
    EXEC_CMD_FOR(kCopyFrom, copy, in_place ? self : self.clone(at::MemoryFormat::Contiguous), written(dst));
    if (!src_on_device && !non_blocking && !self.unsafeGetTensorImpl()->is_wrapped_number() && !on_launch_worker()) {
      // CUDA's blocking copy from the host waits for its stream: the data is on
      // the device when copy_ returns, so any stream may read it with no other
      // ordering. (A Python number moved for a kernel is that kernel's argument
      // on the part, not a transfer the program made: no wait. A kernel's own
      // copy, made on a stream worker — a collective's transport — is part of
      // that kernel: waiting there would wait for the worker itself.)
      count_route(kCopyFrom, Route::Synchronized);
      synchronize_stream(current_stream(dst.device().index()));
    }
    return dst;
  }
  if (src_on_device && dst_on_device) {
    // Between two devices, as CUDA copies: each device's current stream waits
    // for the other's work so far, and the copy runs on the source's, so no
    // host waits (blocking or not: the result is on a device either way).
    const c10::Stream source_stream = current_stream(self.device().index());
    const c10::Stream destination_stream = current_stream(dst.device().index());
    void* destination_ready = nullptr;
    record_event(&destination_ready, destination_stream);
    block_on_event(destination_ready, source_stream);
    destroy_event(destination_ready);
    {
      const c10::DeviceGuard guard(self.device());
      EXEC_CMD_FOR(kCopyFrom, copy, self, written(dst));
    }
    void* copied = nullptr;
    record_event(&copied, source_stream);
    block_on_event(copied, destination_stream);
    destroy_event(copied);
    return dst;
  }
  if (src_on_device && !dst_on_device && non_blocking && is_pinned(dst.data_ptr())) {
    // Out of the device into pinned memory, non_blocking: queued like a kernel;
    // the host sees the data once the stream is synchronised.
    const c10::DeviceGuard guard(self.device());
    if (observers::watched()) {
      LaunchWork cost;
      cost.work = Work::DeviceToHost;
      cost.bytes = static_cast<double>(self.nbytes());
      describe_next_launch(cost);
    }
    EXEC_CMD_FOR(kCopyFrom, copy, self, written(dst));
    return dst;
  }
  // Out of the device (blocking, or into pageable memory): the host reads
  // device memory, so the source's current stream drains first (as CUDA's
  // copy synchronises its stream).
  TORCH_INTERNAL_ASSERT(src_on_device && !dst_on_device);
  count_route(kCopyFrom, Route::Synchronized);
  synchronize_stream(current_stream(self.device().index()));
  check_defined(self, "copy_");
  if (observers::watched()) {  // the host itself reads the source
    observers::on_host_access(describe_tensor(self), false, kCopyFrom);
  }
  if (observers::values_computed()) {
    copy_on_host(self, dst);
  } else {
    observers::on_host_read(self, dst, kCopyFrom);  // the values are an observer's to answer
  }
  if (observers::watched()) {  // the host waited for the transfer too
    observers::on_host_transfer(static_cast<double>(self.nbytes()),
                                !is_pinned(src_on_device ? dst.data_ptr() : self.data_ptr()));
  }
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sym_sizes(), std::nullopt);
  return simhpu::_copy_from(self, dst, false);  // qualified: at::_copy_from is a candidate too (ADL)
}

at::Scalar _local_scalar_dense(const at::Tensor& self) {
  count_route("aten::_local_scalar_dense", Route::Synchronized);
  synchronize_stream(current_stream(self.device().index()));
  check_defined(self, "item");
  if (observers::watched()) {  // the host reads the value: a stream other than the current one may still write it
    observers::on_host_access(describe_tensor(self), false, "aten::_local_scalar_dense");
  }
  if (!observers::values_computed()) {  // the value is an observer's to answer
    const at::Tensor value = at::empty({}, self.options().device(c10::kCPU));
    observers::on_host_read(self, value, "aten::_local_scalar_dense");
    return value.item();
  }
  return describe_tensor(self).cpu_view().item();
}

// Launch records keep memory alive until their kernels ran (see the
// allocator), so memory used on another stream is safe already; the sanitizer
// is told, as on real hardware a free without it would not be safe.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1 && stream.device() == self.device(),
              "record_stream: expected a stream of ", self.device(), ", got ", stream);
  if (observers::watched() && self.storage().data() != nullptr) {
    observers::on_record_stream(stream, host_address(self.device().index(), self.storage().data()));
  }
}

// CUDA's answer: a device tensor may take a CPU tensor's place (and back) in
// `param.data = ...`, so Module.to() keeps Parameters (and tied weights) the
// same objects. c10's own check knows only its built-in dense backends.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto plain_dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.is_privateuseone());
  };
  return plain_dense(self) && plain_dense(from);
}

} // namespace

// A lazily conjugated or negated source reaches _copy_from as it is: the copy
// kernel resolves the bits (materialising it first would copy, and recurse).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("_copy_from", TORCH_FN(_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(_local_scalar_dense));
}

} // namespace simhpu
