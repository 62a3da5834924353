#pragma once
// What an operator's meta kernel said about a call, remembered by the call's
// signature: the operator, every tensor's dtype, sizes, strides, offset and
// which tensors share storage or are one tensor, and every other argument's
// value. A meta kernel is a pure function of exactly these, so a repeated
// signature (every step of a training loop) needs no meta kernel at all: many
// of PyTorch's meta kernels are Python, tens of microseconds a call. For an
// operator PyTorch tags pointwise, a floating-point number's value is left out
// (its kind stays): such an operator's outputs are its tensors' broadcast
// shape in the dtype type promotion gives, and promotion reads a number's kind,
// not its value. An optimizer passes a new step size every step (AdamW's
// addcdiv), which would otherwise miss the cache on every call.
#include "aten/meta_call.h"

#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <vector>

namespace simhpu {

class MetaSignature {
 public:
  // False when some argument is of a kind the signature cannot hold.
  bool build(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args);
  bool operator==(const MetaSignature& other) const { return words_ == other.words_; }
  size_t hash() const;

 private:
  bool add(const c10::IValue& v, bool float_values);
  void add_tensor(const at::Tensor& t);
  std::vector<int64_t> words_;
  c10::SmallVector<const void*, 8> storages_;  // first-seen order, for the sharing pattern
  c10::SmallVector<const void*, 8> tensors_;
};

// The remembered outcome for `signature`, or null (entries live for good).
const MetaOutcome* cached_meta(const MetaSignature& signature);
void remember_meta(MetaSignature signature, MetaOutcome outcome);

} // namespace simhpu
