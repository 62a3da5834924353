#include "aten/reduced_precision.h"

#include <ATen/core/List.h>

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

namespace simhpu {
namespace {

std::atomic<bool> enabled{false};

// Operators whose result is exact at any precision (a copy) or is defined by the
// dtype's own precision (the next representable value; nan_to_num's default
// replacements, the dtype's largest values): run as they are. So do comparisons,
// which round a Scalar operand to the tensor's dtype before comparing (0.30003
// is half's 0.30005: le is true in half, false at float32), and bincount, whose
// weights' sums are float64 on the CPU for any floating dtype but float32.
// Calls that name their result's dtype (cumsum's dtype=, with an out= of that
// dtype) run as they are too, and so do FFTs: the CPU's (MKL's) have no reduced
// dtype, nor cuFFT a bfloat16 one, so promoting them would accept what parts refuse.
bool keeps_its_precision(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (ref.args[i] == ReferenceOp::Arg::ScalarType && !args[i].isNone()) return true;
  }
  static constexpr std::string_view kNames[] = {
      "aten::nextafter", "aten::_to_copy", "aten::copy_", "aten::clone", "aten::_copy_from",
      "aten::_copy_from_and_resize", "aten::_local_scalar_dense", "aten::equal", "aten::nan_to_num",
      "aten::nan_to_num_", "aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge",
      "aten::eq_", "aten::ne_", "aten::lt_", "aten::le_", "aten::gt_", "aten::ge_", "aten::bincount",
  };
  const std::string& name = ref.op.schema().name();
  if (std::string_view(name).substr(0, 11) == "aten::_fft_") return true;
  for (std::string_view excluded : kNames) {
    if (name == excluded) return true;
  }
  return false;
}

bool is_reduced(c10::ScalarType t) { return t == c10::ScalarType::Half || t == c10::ScalarType::BFloat16; }

template <typename F>
void for_each_tensor(const c10::IValue& value, F&& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) visit(element.toTensor());
    }
  }
}

// The one reduced dtype every floating tensor of the call has, or Undefined
// where the call mixes precisions (the CPU kernel then decides, as it would:
// promoting would accept an mm of half by float the part refuses), carries
// complex or sparse tensors, or has no reduced tensor. A 0-dim float tensor
// does not count: type promotion lets the dimensioned tensors decide.
c10::ScalarType common_reduced_dtype(c10::ArrayRef<c10::IValue> args) {
  c10::ScalarType reduced = c10::ScalarType::Undefined;
  bool refused = false;
  for (const c10::IValue& arg : args) {
    for_each_tensor(arg, [&](const at::Tensor& t) {
      if (!t.defined() || refused) return;
      if (t.layout() != c10::kStrided || at::isComplexType(t.scalar_type())) {
        refused = true;
      } else if (is_reduced(t.scalar_type())) {
        refused = reduced != c10::ScalarType::Undefined && reduced != t.scalar_type();
        reduced = t.scalar_type();
      } else if (at::isFloatingType(t.scalar_type()) && t.dim() > 0) {
        refused = true;
      }
    });
  }
  return refused ? c10::ScalarType::Undefined : reduced;
}

bool writes(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args, size_t i) {
  return ref.arg_written[i] || ref.writes_unannounced(i, args);
}

// Whether a written tensor shares memory with another of the call's tensors: copies
// would part them, and the CPU kernel's overlap checks would no longer see it.
bool written_overlaps_another(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args) {
  std::vector<at::Tensor> all, written;
  for (size_t i = 0; i < args.size(); ++i) {
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      all.push_back(t);
      if (writes(ref, args, i)) written.push_back(t);
    });
  }
  for (const at::Tensor& w : written) {
    for (const at::Tensor& t : all) {
      if (t.unsafeGetTensorImpl() != w.unsafeGetTensorImpl() && t.storage().is_alias_of(w.storage())) return true;
    }
  }
  return false;
}

bool draws_randomness(const ReferenceOp& ref) {
  if (ref.hidden_randomness) return true;
  for (ReferenceOp::Arg kind : ref.args) {
    if (kind == ReferenceOp::Arg::Generator) return true;
  }
  return false;
}

// softmax and log_softmax of a half tensor into float32 (half_to_float: what
// torch.softmax(x, dim, dtype=torch.float32) asks of a half x), which the part's
// kernels do in one pass and the CPU's refuse: the input as float32, the flag off,
// the same result. True where the call was one.
bool softmax_half_to_float(const ReferenceOp& ref, torch::jit::Stack& stack, size_t first) {
  const std::string& name = ref.op.schema().name();
  if ((name != "aten::_softmax" && name != "aten::_log_softmax") || ref.num_args() < 3) return false;
  c10::IValue& self = stack[first];
  c10::IValue& half_to_float = stack[first + 2];
  if (!self.isTensor() || !half_to_float.isBool() || !half_to_float.toBool() ||
      self.toTensor().scalar_type() != c10::ScalarType::Half) {
    return false;
  }
  self = self.toTensor().to(at::kFloat);
  half_to_float = false;
  return true;
}

// The backward of such a softmax, into its half input's gradient (float32
// gradients and output, input_dtype half), which the CPU's kernel refuses:
// computed as float32's. Where the call is one, its input_dtype becomes float32
// and the result is the stack position of its half out=, for the caller to stand
// a float32 copy in for.
std::optional<size_t> softmax_backward_into_half(const ReferenceOp& ref, torch::jit::Stack& stack, size_t first) {
  const std::string& name = ref.op.schema().name();
  if ((name != "aten::_softmax_backward_data" && name != "aten::_log_softmax_backward_data") || ref.num_args() != 5) {
    return std::nullopt;
  }
  c10::IValue& input_dtype = stack[first + 3];
  const c10::IValue& grad = stack[first];
  const c10::IValue& out = stack[first + 4];
  if (!input_dtype.isInt() || static_cast<c10::ScalarType>(input_dtype.toInt()) != c10::ScalarType::Half ||
      !grad.isTensor() || grad.toTensor().scalar_type() != at::kFloat || !out.isTensor() ||
      out.toTensor().scalar_type() != c10::ScalarType::Half) {
    return std::nullopt;
  }
  input_dtype = static_cast<int64_t>(at::kFloat);
  return first + 4;
}

} // namespace

void set_reduced_precision_in_float32(bool on) { enabled.store(on); }
bool reduced_precision_in_float32() { return enabled.load(); }

FloatPromotion::FloatPromotion(const ReferenceOp& ref, torch::jit::Stack& stack) : op_name_(&ref.name) {
  if (!enabled.load(std::memory_order_relaxed) || draws_randomness(ref)) return;
  const size_t first = stack.size() - ref.num_args();
  if (softmax_half_to_float(ref, stack, first)) return;
  if (const std::optional<size_t> out_position = softmax_backward_into_half(ref, stack, first)) {
    // (what the kernel writes into the float32 copy goes back rounded to half)
    const at::Tensor out = stack[*out_position].toTensor();
    at::Tensor copy = out.to(at::kFloat);
    written_.emplace_back(out, copy);
    stack[*out_position] = copy;
    reduced_ = c10::ScalarType::Half;
    return;
  }
  const auto args = c10::ArrayRef<c10::IValue>(stack).slice(first, ref.num_args());
  if (keeps_its_precision(ref, args)) return;
  const c10::ScalarType reduced = common_reduced_dtype(args);
  if (reduced == c10::ScalarType::Undefined || written_overlaps_another(ref, args)) return;
  reduced_ = reduced;
  // One copy per tensor: a tensor passed twice (self and out=) stays one tensor.
  std::vector<std::tuple<const c10::TensorImpl*, at::Tensor, bool>> copies;  // (tensor, copy, written)
  auto promoted = [&](const at::Tensor& t, bool written) -> at::Tensor {
    if (!t.defined() || t.scalar_type() != reduced) return t;
    for (auto& [impl, copy, copy_written] : copies) {
      if (impl != t.unsafeGetTensorImpl()) continue;
      if (written && !copy_written) {  // (read as self before it is written as out=)
        written_.emplace_back(t, copy);
        copy_written = true;
      }
      return copy;
    }
    at::Tensor copy = t.to(at::kFloat);
    copies.emplace_back(t.unsafeGetTensorImpl(), copy, written);
    if (written) written_.emplace_back(t, copy);
    return copy;
  };
  for (size_t i = 0; i < ref.num_args(); ++i) {
    c10::IValue& arg = stack[first + i];
    const bool written = writes(ref, args, i);
    if (arg.isTensor()) {
      arg = promoted(arg.toTensor(), written);
    } else if (arg.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : arg.toTensorVector()) list.push_back(promoted(t, written));
      arg = std::move(list);
    } else if (arg.isList() && ref.args[i] == ReferenceOp::Arg::OptionalTensorList) {
      c10::List<std::optional<at::Tensor>> list;
      for (const c10::IValue& element : arg.toListRef()) {
        list.push_back(element.isTensor() ? std::optional<at::Tensor>(promoted(element.toTensor(), written))
                                          : std::nullopt);
      }
      arg = std::move(list);
    }
  }
}

void FloatPromotion::write_back() const {
  for (const auto& [original, copy] : written_) {
    if (original.sizes() != copy.sizes()) {
      TORCH_CHECK(original.storage().resizable(), *op_name_, ": its CPU kernel reshaped a written argument to ", copy.sizes(),
                  ", where its meta kernel announced ", original.sizes());
      original.resize_(copy.sizes());
    }
    original.copy_(copy);
  }
}

void FloatPromotion::round_results(torch::jit::Stack& results, size_t count) const {
  if (!active()) return;
  auto rounded = [&](const at::Tensor& t) {
    return t.defined() && t.scalar_type() == at::kFloat ? t.to(reduced_) : t;
  };
  for (size_t r = 0; r < count && r < results.size(); ++r) {
    c10::IValue& result = results[r];
    if (result.isTensor()) {
      result = rounded(result.toTensor());
    } else if (result.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : result.toTensorVector()) list.push_back(rounded(t));
      result = std::move(list);
    }
  }
}

} // namespace simhpu
