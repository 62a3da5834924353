#pragma once
// Asking an operator's meta kernel about a call before anything runs: the
// outputs' sizes, strides and dtypes, and how written arguments change shape.
#include "aten/reference_op.h"

#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <utility>
#include <variant>
#include <vector>

namespace simhpu {

struct TensorShape {
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> strides;
  int64_t storage_offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // Undefined: an undefined tensor
  bool conj = false;
  bool neg = false;

  static TensorShape of(const at::Tensor& t);
  bool matches(const at::Tensor& t) const;
};

struct MetaOutcome {
  // Per return: a tensor's shape, a list of them, or a value worked out from metadata.
  using Return = std::variant<TensorShape, std::vector<TensorShape>, c10::IValue>;
  std::vector<Return> returns;
  // Written tensor arguments the meta kernel resized or restrided, by position.
  std::vector<std::pair<size_t, TensorShape>> written;
};

// A device tensor of `shape` (undefined for an undefined shape).
at::Tensor empty_device_tensor(const TensorShape& shape);

// Meta tensors with the callers' sizes, strides and offsets; tensors sharing a
// storage share a meta storage, and one tensor passed twice stays one, so the
// meta kernel's overlap and in-place checks see what the CPU kernel would.
class MetaArguments {
 public:
  c10::IValue value(const c10::IValue& arg, ReferenceOp::Arg kind);
  at::Tensor meta(const at::Tensor& t);

 private:
  c10::Storage storage_for(const c10::Storage& device_storage);

  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 4> storages_;
  c10::SmallVector<std::pair<const c10::TensorImpl*, at::Tensor>, 4> tensors_;
};

// Runs the meta kernel on `meta_stack`; false when it cannot tell the
// outputs: it needs the data, has no answer for these arguments, or rejects
// them. The call then runs synchronised, where the CPU kernel has the last
// word (its result, or its error).
bool run_meta(const ReferenceOp& ref, torch::jit::Stack& meta_stack);

// What the meta kernel says of a call with `args`; nullopt as for run_meta,
// or when it resizes a written tensor that holds data (see meta_call.cpp).
std::optional<MetaOutcome> ask_meta(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args);

} // namespace simhpu
