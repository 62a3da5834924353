#pragma once
// What an operator's meta kernel said about a call, remembered by the call's
// signature: the operator, every tensor's dtype, sizes, strides, offset and
// which tensors share storage or are one tensor, and every other argument's
// value. A meta kernel is a pure function of exactly these, so a repeated
// signature (every step of a training loop) needs no meta kernel at all: many
// of PyTorch's meta kernels are Python, tens of microseconds a call.
#include "aten/reference_op.h"

#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
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

class MetaSignature {
 public:
  // False when some argument is of a kind the signature cannot hold.
  bool build(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args);
  bool operator==(const MetaSignature& other) const { return words_ == other.words_; }
  size_t hash() const;

 private:
  bool add(const c10::IValue& v);
  void add_tensor(const at::Tensor& t);
  std::vector<int64_t> words_;
  c10::SmallVector<const void*, 8> storages_;  // first-seen order, for the sharing pattern
  c10::SmallVector<const void*, 8> tensors_;
};

// The remembered outcome for `signature`, or null (entries live for good).
const MetaOutcome* cached_meta(const MetaSignature& signature);
void remember_meta(MetaSignature signature, MetaOutcome outcome);

} // namespace simhpu
