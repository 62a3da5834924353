#include "aten/reference_op.h"

#include <ATen/core/enum_tag.h>
#include <ATen/core/jit_type.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace simhpu {
namespace {

ReferenceOp::Arg classify_arg(const c10::Argument& arg) {
  // The real type: a ScalarType argument's type() is int.
  c10::TypePtr type = arg.real_type();
  if (type->kind() == c10::TypeKind::OptionalType) {
    type = type->containedType(0);
  }
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return ReferenceOp::Arg::Tensor;
    case c10::TypeKind::GeneratorType:
      return ReferenceOp::Arg::Generator;
    case c10::TypeKind::ScalarTypeType:
      return ReferenceOp::Arg::ScalarType;
    case c10::TypeKind::ListType: {
      const c10::TypePtr& element = type->containedType(0);
      if (element->kind() == c10::TypeKind::TensorType) {
        return ReferenceOp::Arg::TensorList;
      }
      if (element->kind() == c10::TypeKind::OptionalType &&
          element->containedType(0)->kind() == c10::TypeKind::TensorType) {
        return ReferenceOp::Arg::OptionalTensorList;
      }
      return ReferenceOp::Arg::Other;
    }
    default:
      return ReferenceOp::Arg::Other;
  }
}

// The argument a return aliases: the one whose alias set the return names.
int aliased_argument(const c10::FunctionSchema& schema, const c10::Argument& ret) {
  const c10::AliasInfo* info = ret.alias_info();
  if (info == nullptr || info->beforeSets().empty()) {
    return -1;
  }
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::AliasInfo* arg_info = args[i].alias_info();
    if (arg_info != nullptr && arg_info->beforeSets() == info->beforeSets()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// Meta kernels model CUDA's kernels, and a few of CUDA's results differ from
// the CPU's: layer and batch norm keep their statistics in float32 for
// reduced-precision inputs on CUDA, in the input's dtype on the CPU; batch norm
// without training returns empty statistics on the CPU; embedding_bag's
// bookkeeping outputs are shaped differently. Those calls run synchronised, so
// the outputs are the CPU kernel's own (the backward kernels expect them so).
bool reduced_precision(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && at::isReducedFloatingType(v.toTensor().scalar_type());
}
bool reduced_precision_first(c10::ArrayRef<c10::IValue> args) {
  return reduced_precision(args[0]);
}
// native_batch_norm(input, weight, bias, running_mean, running_var, training, ...) and
// _native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, ...).
bool batch_norm_meta_differs(c10::ArrayRef<c10::IValue> args) {
  return reduced_precision(args[0]) || (args.size() > 5 && args[5].isBool() && !args[5].toBool());
}
bool always(c10::ArrayRef<c10::IValue>) {
  return true;
}
// nll_loss's meta kernels (PyTorch's Python ones) take a target of any integer dtype, its CPU
// kernels only int64 and uint8: such a call runs synchronised, refused at once as on the CPU.
template <size_t Target>
bool target_the_cpu_refuses(c10::ArrayRef<c10::IValue> args) {
  if (args.size() <= Target || !args[Target].isTensor() || !args[Target].toTensor().defined()) return false;
  const c10::ScalarType dtype = args[Target].toTensor().scalar_type();
  return dtype != c10::ScalarType::Long && dtype != c10::ScalarType::Byte;
}

// index_put(self, indices, values, ...): its meta kernel takes values of any shape, its CPU kernel
// refuses values that do not broadcast to what the indices select (or indices that do not broadcast
// together). Where integer indices say that shape without their values, such a call runs
// synchronised, refused at once as on the CPU. A boolean mask selects as many as it holds trues:
// alone it stays asynchronous; beside other indices (which it must broadcast with) the call runs
// synchronised, as CUDA's does, which reads the mask's nonzero positions at the call.
bool index_put_values_the_cpu_refuses(c10::ArrayRef<c10::IValue> args) {
  if (args.size() < 3 || !args[0].isTensor() || !args[1].isList() || !args[2].isTensor()) return false;
  const at::Tensor& self = args[0].toTensor();
  std::vector<int64_t> broadcast;  // the indices' shapes broadcast together, from the last dimension
  std::vector<int64_t> indexed_dims;
  const auto indices = args[1].toListRef();
  const auto defined = std::count_if(indices.begin(), indices.end(), [](const c10::IValue& i) {
    return i.isTensor() && i.toTensor().defined();
  });
  for (size_t d = 0; d < indices.size(); ++d) {
    if (!indices[d].isTensor() || !indices[d].toTensor().defined()) continue;
    const at::Tensor& index = indices[d].toTensor();
    if (index.scalar_type() == c10::ScalarType::Bool || index.scalar_type() == c10::ScalarType::Byte) return defined > 1;
    indexed_dims.push_back(static_cast<int64_t>(d));
    const at::IntArrayRef sizes = index.sizes();
    if (sizes.size() > broadcast.size()) broadcast.insert(broadcast.begin(), sizes.size() - broadcast.size(), 1);
    for (size_t i = 1; i <= sizes.size(); ++i) {
      int64_t& b = broadcast[broadcast.size() - i];
      const int64_t n = sizes[sizes.size() - i];
      if (b != n && b != 1 && n != 1) return true;  // (indexing tensors that do not broadcast together)
      if (b == 1) b = n;
    }
  }
  if (indexed_dims.empty() || indexed_dims.back() >= self.dim()) return false;
  const bool adjacent = indexed_dims.back() - indexed_dims.front() + 1 == static_cast<int64_t>(indexed_dims.size());
  std::vector<int64_t> selected;
  auto keep_dims = [&](int64_t from, int64_t to) {
    for (int64_t d = from; d < to; ++d) {
      if (std::find(indexed_dims.begin(), indexed_dims.end(), d) == indexed_dims.end()) selected.push_back(self.size(d));
    }
  };
  if (adjacent) keep_dims(0, indexed_dims.front());
  selected.insert(selected.end(), broadcast.begin(), broadcast.end());
  keep_dims(adjacent ? indexed_dims.back() + 1 : 0, self.dim());
  const at::IntArrayRef values = args[2].toTensor().sizes();
  if (values.size() > selected.size()) return true;
  for (size_t i = 1; i <= values.size(); ++i) {
    const int64_t v = values[values.size() - i], s = selected[selected.size() - i];
    if (v != 1 && v != s) return true;
  }
  return false;
}

using MetaDiffers = bool (*)(c10::ArrayRef<c10::IValue>);
MetaDiffers meta_differs_for(const std::string& name) {
  // By operator name: every overload (the out= ones take the same leading arguments).
  static const std::unordered_map<std::string, MetaDiffers> table = {
      {"aten::native_layer_norm", &reduced_precision_first},
      {"aten::native_batch_norm", &batch_norm_meta_differs},
      {"aten::_native_batch_norm_legit", &batch_norm_meta_differs},
      {"aten::_native_batch_norm_legit_no_training", &reduced_precision_first},
      {"aten::_batch_norm_with_update", &reduced_precision_first},
      {"aten::_batch_norm_no_update", &reduced_precision_first},
      {"aten::nll_loss_forward", &target_the_cpu_refuses<1>},
      {"aten::nll_loss2d_forward", &target_the_cpu_refuses<1>},
      {"aten::nll_loss_backward", &target_the_cpu_refuses<2>},
      {"aten::nll_loss2d_backward", &target_the_cpu_refuses<2>},
      {"aten::_index_put_impl_", &index_put_values_the_cpu_refuses},
      {"aten::_embedding_bag", &always},
      {"aten::_embedding_bag_forward_only", &always},
      // A 1-D input: the CPU's result is 0-dim, the meta kernel's has one element.
      {"aten::multilabel_margin_loss_forward", &always},
      // The workspace's size is oneDNN's to choose.
      {"aten::mkldnn_rnn_layer", &always},
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

} // namespace

bool meta_known_to_differ(const std::string& op_name) {
  return meta_differs_for(op_name) != nullptr;
}

namespace {

// Writes no schema announces: native_batch_norm (and its out= overload)
// updates running_mean and running_var (arguments 3 and 4) when `training`
// (argument 5) is true. Launch records must say so, or the sanitizer would
// take the update for a read.
std::vector<std::pair<int, int>> unannounced_writes_of(const std::string& name) {
  if (name == "aten::native_batch_norm" || name == "aten::native_batch_norm.out") return {{3, 5}, {4, 5}};
  return {};
}

std::unique_ptr<ReferenceOp> describe(const c10::OperatorHandle& op) {
  auto ref = std::make_unique<ReferenceOp>(op);
  const c10::FunctionSchema& schema = op.schema();
  ref->name = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());

  bool takes_generator = false;
  for (const auto& arg : schema.arguments()) {
    ref->args.push_back(classify_arg(arg));
    ref->arg_written.push_back(arg.alias_info() != nullptr && arg.alias_info()->isWrite());
    ref->arg_is_out.push_back(ref->arg_written.back() && arg.kwarg_only());
    takes_generator = takes_generator || ref->args.back() == ReferenceOp::Arg::Generator;
  }
  bool view = false;
  for (const auto& ret : schema.returns()) {
    ref->return_alias.push_back(aliased_argument(schema, ret));
    view = view || (ret.alias_info() != nullptr && !ret.alias_info()->isWrite());
  }
  ref->unannounced_writes = unannounced_writes_of(ref->name);
  ref->hidden_randomness = op.hasTag(at::Tag::nondeterministic_seeded) && !takes_generator;
  ref->pointwise = op.hasTag(at::Tag::pointwise);
  ref->shapes_depend_on_values =
      op.hasTag(at::Tag::dynamic_output_shape) || op.hasTag(at::Tag::data_dependent_output);
  ref->meta_differs = meta_differs_for(schema.name());

  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) {
    ref->kind = ReferenceOp::Kind::NoCpuKernel;
  } else if (view && !schema.is_mutable()) {
    ref->kind = ReferenceOp::Kind::View;
  } else if (ref->shapes_depend_on_values || !op.hasComputedKernelForDispatchKey(c10::DispatchKey::Meta)) {
    ref->kind = ReferenceOp::Kind::Synchronized;
  } else if (ref->hidden_randomness) {
    ref->kind = ReferenceOp::Kind::Synchronized;
    const std::optional<int> gate = schema.argumentIndexWithName("dropout_p");
    if (gate.has_value() && schema.arguments()[*gate].type()->kind() == c10::TypeKind::FloatType) {
      ref->randomness_gate = *gate;
    }
  } else {
    // Functional ops that reach here have no structured kernel (those arrive
    // as their out= overload), so their out= kernels are hand-written and may
    // shape or type results differently: the functional CPU kernel runs, and
    // its results are copied into the outputs the meta kernel shaped.
    ref->kind = ReferenceOp::Kind::Async;
  }
  return ref;
}

} // namespace

const ReferenceOp& reference_op(const c10::OperatorHandle& op) {
  // A schema lives as long as its operator registration: a stable key.
  const c10::FunctionSchema* key = &op.schema();
  thread_local std::unordered_map<const c10::FunctionSchema*, const ReferenceOp*> seen;
  auto hit = seen.find(key);
  if (hit != seen.end()) {
    return *hit->second;
  }
  static std::mutex mu;
  static auto* all = new std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<ReferenceOp>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*all)[key];
  if (!slot) {
    slot = describe(op);
  }
  seen.emplace(key, slot.get());
  return *slot;
}

} // namespace simhpu
