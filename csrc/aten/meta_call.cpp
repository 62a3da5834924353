#include "aten/meta_call.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/List.h>
#include <c10/core/TensorImpl.h>

namespace simhpu {
namespace {

bool changes_metadata(const at::Tensor& device_tensor, const at::Tensor& meta) {
  return device_tensor.defined() && meta.defined() &&
      (device_tensor.sizes() != meta.sizes() || device_tensor.strides() != meta.strides() ||
       device_tensor.storage_offset() != meta.storage_offset());
}

// Resizing a written tensor that holds data is where meta kernels (often
// Python references) and CPU kernels part ways: the CPU kernel refuses when
// the tensor is also an input (x.logical_xor_(y) as logical_xor.out(x, y,
// out=x)), or resizes with a warning. Such calls run synchronised, so the CPU
// kernel decides.
bool resizes_filled_tensor(c10::ArrayRef<c10::IValue> args,
                           const std::vector<std::pair<size_t, c10::IValue>>& written) {
  for (const auto& [i, m] : written) {
    if (m.isTensor() && args[i].isTensor() && args[i].toTensor().defined() &&
        args[i].toTensor().storage().nbytes() > 0 && changes_metadata(args[i].toTensor(), m.toTensor())) {
      return true;
    }
  }
  return false;
}

} // namespace

TensorShape TensorShape::of(const at::Tensor& t) {
  TensorShape s;
  if (!t.defined()) return s;
  s.sizes.assign(t.sizes().begin(), t.sizes().end());
  s.strides.assign(t.strides().begin(), t.strides().end());
  s.storage_offset = t.storage_offset();
  s.dtype = t.scalar_type();
  s.conj = t.is_conj();
  s.neg = t.is_neg();
  return s;
}

bool TensorShape::matches(const at::Tensor& t) const {
  return t.defined() && c10::IntArrayRef(sizes) == t.sizes() && c10::IntArrayRef(strides) == t.strides() &&
      storage_offset == t.storage_offset();
}

at::Tensor empty_device_tensor(const TensorShape& shape) {
  if (shape.dtype == c10::ScalarType::Undefined) return at::Tensor();
  return at::detail::empty_strided_generic(shape.sizes, shape.strides, at::GetAllocator(at::kPrivateUse1),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), shape.dtype);
}

c10::IValue MetaArguments::value(const c10::IValue& arg, ReferenceOp::Arg kind) {
  switch (kind) {
    case ReferenceOp::Arg::Tensor:
      return arg.isTensor() && arg.toTensor().is_privateuseone() ? c10::IValue(meta(arg.toTensor())) : arg;
    case ReferenceOp::Arg::TensorList: {
      c10::List<at::Tensor> out;
      for (const c10::IValue& e : arg.toListRef()) out.push_back(meta(e.toTensor()));
      return out;
    }
    case ReferenceOp::Arg::OptionalTensorList: {
      if (arg.isNone()) return arg;
      c10::List<std::optional<at::Tensor>> out;
      for (const c10::IValue& e : arg.toListRef()) {
        out.push_back(e.isTensor() ? std::optional<at::Tensor>(meta(e.toTensor())) : std::nullopt);
      }
      return out;
    }
    case ReferenceOp::Arg::Generator:
      return c10::IValue();
    case ReferenceOp::Arg::ScalarType:
    case ReferenceOp::Arg::Other:
      return arg.isDevice() && arg.toDevice().is_privateuseone() ? c10::IValue(c10::Device(c10::kMeta)) : arg;
  }
  return arg;
}

at::Tensor MetaArguments::meta(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone()) return t;
  // One tensor passed twice (x.add_(y, out=x) style) stays one tensor: kernels
  // tell in-place calls apart by identity.
  for (const auto& [device_impl, m] : tensors_) {
    if (device_impl == t.unsafeGetTensorImpl()) return m;
  }
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(storage_for(t.storage())), c10::DispatchKeySet(c10::DispatchKey::Meta), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  at::Tensor m(std::move(impl));
  m._set_conj(t.is_conj());
  m._set_neg(t.is_neg());
  tensors_.emplace_back(t.unsafeGetTensorImpl(), m);
  return m;
}

c10::Storage MetaArguments::storage_for(const c10::Storage& device_storage) {
  for (auto& [impl, storage] : storages_) {
    if (impl == device_storage.unsafeGetStorageImpl()) return storage;
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), device_storage.nbytes(),
                       c10::DataPtr(nullptr, c10::Device(c10::kMeta)), at::GetAllocator(c10::kMeta),
                       /*resizable=*/true);
  storages_.emplace_back(device_storage.unsafeGetStorageImpl(), storage);
  return storage;
}

bool run_meta(const ReferenceOp& ref, torch::jit::Stack& meta_stack) {
  try {
    ref.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::optional<MetaOutcome> ask_meta(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args) {
  MetaArguments meta;
  torch::jit::Stack meta_stack;
  std::vector<std::pair<size_t, c10::IValue>> written;  // meta versions of written arguments
  for (size_t i = 0; i < ref.num_args(); ++i) {
    meta_stack.push_back(meta.value(args[i], ref.args[i]));
    if (ref.arg_written[i]) written.emplace_back(i, meta_stack.back());
  }
  if (!run_meta(ref, meta_stack) || resizes_filled_tensor(args, written)) {
    return std::nullopt;
  }
  MetaOutcome outcome;
  for (const auto& [i, m] : written) {
    if (m.isTensor() && changes_metadata(args[i].toTensor(), m.toTensor())) {
      outcome.written.emplace_back(i, TensorShape::of(m.toTensor()));
    } else if (m.isTensorList()) {
      const auto device_list = args[i].toTensorVector();
      const auto meta_list = m.toTensorVector();
      for (size_t k = 0; k < device_list.size(); ++k) {
        TORCH_CHECK(!changes_metadata(device_list[k], meta_list[k]), ref.name,
                    ": resizing tensors of a written list is not supported on simhpu");
      }
    }
  }
  for (size_t r = 0; r < ref.return_alias.size(); ++r) {
    const c10::IValue& m = meta_stack[r];
    if (m.isTensor()) {
      outcome.returns.emplace_back(TensorShape::of(m.toTensor()));
    } else if (m.isTensorList()) {
      std::vector<TensorShape> shapes;
      for (const at::Tensor& t : m.toTensorVector()) shapes.push_back(TensorShape::of(t));
      outcome.returns.emplace_back(std::move(shapes));
    } else {
      outcome.returns.emplace_back(m);
    }
  }
  return outcome;
}

} // namespace simhpu
