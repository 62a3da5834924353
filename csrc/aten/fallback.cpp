#include "aten/fallback.h"

#include "aten/sparse.h"

#include "aten/call_device.h"
#include "aten/int32_targets.h"
#include "aten/meta_cache.h"
#include "aten/meta_call.h"
#include "aten/op_routes.h"
#include "aten/reference_call.h"
#include "aten/reference_op.h"
#include "aten/resize.h"
#include "aten/sparse.h"
#include "aten/synchronized_call.h"
#include "runtime/observers.h"
#include "runtime/streams.h"


#include <ATen/MemoryOverlap.h>
#include <ATen/core/List.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <torch/library.h>

#include <unordered_map>

namespace simhpu {
namespace {

// ---- The three routes ------------------------------------------------------

// What the meta kernel says of this call: the outcome remembered for its
// signature, or a fresh one (held in `fresh`; remembered if `remember`). Null
// when the meta kernel cannot tell.
const MetaOutcome* meta_outcome(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args,
                                std::optional<MetaOutcome>& fresh, bool remember) {
  MetaSignature signature;
  const bool cacheable = signature.build(ref, args);
  if (cacheable) {
    if (const MetaOutcome* known = cached_meta(signature)) return known;
  }
  fresh = ask_meta(ref, args);
  if (!fresh) return nullptr;
  if (cacheable && remember) remember_meta(std::move(signature), *fresh);
  return &*fresh;
}

at::Tensor make_view(const at::Tensor& base, const TensorShape& shape) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(base.storage()),
                                                   base.key_set(), c10::scalarTypeToTypeMeta(shape.dtype));
  impl->set_sizes_and_strides(shape.sizes, shape.strides, shape.storage_offset);
  at::Tensor view(std::move(impl));
  view._set_conj(shape.conj);
  view._set_neg(shape.neg);
  return view;
}

void run_view(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first) {
  const auto args = c10::ArrayRef<c10::IValue>(*stack).slice(first, ref.num_args());
  std::optional<MetaOutcome> fresh;
  const MetaOutcome* outcome = meta_outcome(ref, args, fresh, /*remember=*/true);
  if (outcome == nullptr) {
    // The meta kernel rejected the arguments: run it again for its error.
    MetaArguments meta;
    torch::jit::Stack meta_stack;
    for (size_t i = 0; i < ref.num_args(); ++i) meta_stack.push_back(meta.value(args[i], ref.args[i]));
    ref.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
    TORCH_CHECK(false, ref.name, ": its meta kernel cannot describe this view");
  }
  std::vector<c10::IValue> results;
  for (size_t r = 0; r < ref.return_alias.size(); ++r) {
    const int base_index = ref.return_alias[r];
    TORCH_INTERNAL_ASSERT(base_index >= 0, ref.name, ": a view whose base argument is unknown");
    const at::Tensor& base = args[base_index].toTensor();
    if (const auto* shape = std::get_if<TensorShape>(&outcome->returns[r])) {
      results.emplace_back(make_view(base, *shape));
    } else {
      c10::List<at::Tensor> views;
      for (const auto& s : std::get<std::vector<TensorShape>>(outcome->returns[r])) views.push_back(make_view(base, s));
      results.emplace_back(std::move(views));
    }
  }
  torch::jit::drop(*stack, ref.num_args());
  for (auto& r : results) stack->push_back(std::move(r));
  count_route(ref.name.c_str(), Route::Dedicated);
}

// An empty out= tensor asks the kernel to size it (see EmptyOuts below).
bool has_empty_out_argument(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (ref.arg_is_out[i] && args[i].isTensor() && args[i].toTensor().defined() &&
        args[i].toTensor().storage().nbytes() == 0) {
      return true;
    }
  }
  return false;
}

c10::IValue allocate_return(const MetaOutcome::Return& r) {
  if (const auto* shape = std::get_if<TensorShape>(&r)) {
    return empty_device_tensor(*shape);
  }
  if (const auto* shapes = std::get_if<std::vector<TensorShape>>(&r)) {
    c10::List<at::Tensor> out;
    for (const auto& s : *shapes) out.push_back(empty_device_tensor(s));
    return out;
  }
  return std::get<c10::IValue>(r);  // an int, a bool, ...: worked out from metadata alone
}

// Empty out= tensors ask the kernel to size them. Some out= kernels do so
// otherwise than their meta kernels say, so the first such call of an operator
// runs synchronised and compares; the operator's later calls are asynchronous
// if the meta kernel was right.
enum class EmptyOuts { None, Trusted, Learn, Distrusted };
EmptyOuts empty_outs(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args) {
  if (!has_empty_out_argument(ref, args)) return EmptyOuts::None;
  switch (ref.empty_out_meta_trusted.load(std::memory_order_relaxed)) {
    case 1: return EmptyOuts::Trusted;
    case 0: return EmptyOuts::Distrusted;
    default: return EmptyOuts::Learn;
  }
}

bool run_synchronized_and_learn(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first, c10::Device device,
                                const MetaOutcome& outcome) {
  const auto args = c10::ArrayRef<c10::IValue>(*stack).slice(first, ref.num_args());
  std::vector<at::Tensor> written;
  for (const auto& [i, shape] : outcome.written) written.push_back(args[i].toTensor());
  run_synchronized(ref, stack, first, device);
  bool agrees = true;
  for (size_t k = 0; k < written.size(); ++k) {
    agrees = agrees && outcome.written[k].second.matches(written[k]);
  }
  ref.empty_out_meta_trusted.store(agrees ? 1 : 0, std::memory_order_relaxed);
  return true;
}

// A written argument with elements that share memory (an expanded out=): meta
// kernels let it pass, most CPU kernels refuse it. The synchronised route runs
// the CPU kernel at once (over a host copy with the same strides), so the call
// fails, or not, exactly as on the CPU.
bool writes_overlapping_memory(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (ref.arg_written[i] && args[i].isTensor() && args[i].toTensor().defined() &&
        at::has_internal_overlap(args[i].toTensor()) == at::MemOverlap::Yes) {
      return true;
    }
  }
  return false;
}

bool run_async(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first, c10::Device device) {
  const auto args = c10::ArrayRef<c10::IValue>(*stack).slice(first, ref.num_args());
  if (writes_overlapping_memory(ref, args)) {
    return false;
  }
  const EmptyOuts empty = empty_outs(ref, args);
  // (While values are not computed - phantom execution - the meta kernel's outputs are taken:
  // they are the accelerator's, which is what the simulated part runs, and nothing reads them;
  // unless the values are known, and then what the kernel computes is read.)
  const bool values_read = observers::values_computed() || observers::values_known(args);
  if (empty == EmptyOuts::Distrusted || (ref.meta_differs != nullptr && ref.meta_differs(args) && values_read)) {
    return false;
  }
  std::optional<MetaOutcome> fresh;
  const MetaOutcome* outcome = meta_outcome(ref, args, fresh, /*remember=*/empty != EmptyOuts::Learn);
  if (outcome == nullptr) return false;
  // (Nothing to learn from while values are not computed: the meta kernel is taken at its word.)
  if (empty == EmptyOuts::Learn && fresh && values_read) {
    return run_synchronized_and_learn(ref, stack, first, device, *fresh);
  }
  for (const auto& [i, shape] : outcome->written) {
    const at::Tensor& t = args[i].toTensor();
    t.unsafeGetTensorImpl()->set_sizes_and_strides(shape.sizes, shape.strides, shape.storage_offset);
    ensure_storage_fits(t);
  }
  std::vector<c10::IValue> results;
  std::vector<c10::IValue> fresh_outputs;
  for (size_t r = 0; r < ref.return_alias.size(); ++r) {
    if (ref.return_alias[r] >= 0) {
      results.push_back(args[ref.return_alias[r]]);
    } else {
      results.push_back(allocate_return(outcome->returns[r]));
      fresh_outputs.push_back(results.back());
    }
  }
  launch_reference_call(ref, stack, device, std::move(results), fresh_outputs);
  count_route(ref.name.c_str(), Route::Reference);
  return true;
}

// Whether the fallback policy lets `ref` take the reference path (cached per
// operator until the policy changes).
bool allowed(const ReferenceOp& ref) {
  thread_local std::unordered_map<const ReferenceOp*, std::pair<uint64_t, bool>> cache;
  const uint64_t version = fallback_policy_version();
  auto& entry = cache[&ref];
  if (entry.first != version) {
    entry = {version, reference_path_allowed(ref.op.operator_name())};
  }
  return entry.second;
}

} // namespace

void prefer_cpu_kernels_over_composites() {
  // A composite kernel serves every backend but the CPU, which has its own;
  // the two may differ (native_layer_norm decomposes, addr checks less; sum of
  // a sparse tensor is dense on the CPU, sparse by the composite), and the
  // device is to behave as the CPU does: such ops take the reference path.
  struct Layout {
    c10::DispatchKey cpu, device;
    bool also_non_functional_composites;  // structured ops' functional form calls their out= form
    torch::CppFunction (*fallback)();
  };
  const Layout layouts[] = {
      {c10::DispatchKey::CPU, c10::DispatchKey::PrivateUse1, false, &torch::CppFunction::makeFromBoxedFunction<&reference_fallback>},
      {c10::DispatchKey::SparseCPU, c10::DispatchKey::SparsePrivateUse1, true,
       &torch::CppFunction::makeFromBoxedFunction<&sparse_reference_fallback>},
      {c10::DispatchKey::SparseCsrCPU, c10::DispatchKey::SparseCsrPrivateUse1, true,
       &torch::CppFunction::makeFromBoxedFunction<&sparse_reference_fallback>},
  };
  for (const Layout& layout : layouts) {
    // Never destroyed: the registrations last as long as the process.
    auto* library = new torch::Library(torch::Library::IMPL, "aten", layout.device, __FILE__, __LINE__);
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
      auto op = c10::Dispatcher::singleton().findOp(name);
      if (!op || name.name.rfind("aten::", 0) != 0 || op->hasKernelForDispatchKey(layout.device) ||
          !op->hasKernelForDispatchKey(layout.cpu)) {
        continue;
      }
      const bool non_functional = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
      const bool composite = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
          (non_functional && (layout.also_non_functional_composites || takes_int32_target(name.name)));
      if (!composite) continue;
      const std::string qualified = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
      library->impl(qualified.c_str(), layout.fallback());
    }
  }
}

namespace {

// Quantized tensors have no device form (no quantized kernels, no quantizer for
// device memory). A call that would make one is refused at once, naming it:
// meta kernels describe quantize_per_tensor's result as float, so it would
// otherwise fail only on the worker. Calls on quantized device tensors reach the
// QuantizedPrivateUse1 fallback below.
constexpr const char* kNoQuantizedTensors =
    "quantized tensors do not exist on the simhpu device; quantize and run quantized operators on the CPU "
    "(tensor.cpu()), or keep the device work in floating point";

void refuse_quantized_dtype(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (ref.args[i] == ReferenceOp::Arg::ScalarType && args[i].isInt()) {
      const auto dtype = static_cast<c10::ScalarType>(args[i].toInt());
      TORCH_CHECK_NOT_IMPLEMENTED(!c10::isQIntType(dtype), "simhpu: ", ref.name, ": argument '",
                                  ref.op.schema().arguments()[i].name(), "' is ", dtype, ", and ", kNoQuantizedTensors);
    }
  }
}

void refuse_quantized_call(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "simhpu: ", op.schema().operator_name(), ": ", kNoQuantizedTensors);
}

void run_on_reference_path(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool synchronized) {
  const ReferenceOp& ref = reference_op(op);
  if (ref.kind == ReferenceOp::Kind::NoCpuKernel) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "simhpu: ", ref.name,
                                " has no simhpu kernel, and no CPU kernel to run as its reference kernel; "
                                "give it one in op_plugin_functions.yaml");
  }
  if (ref.kind != ReferenceOp::Kind::View && !allowed(ref)) {
    refuse_reference_path(ref.name);
  }
  const size_t first = stack->size() - ref.num_args();
  refuse_quantized_dtype(ref, c10::ArrayRef<c10::IValue>(*stack).slice(first, ref.num_args()));
  widen_int32_target(ref, *stack, first);
  if (ran_where_self_is(op, ref, stack, first)) return;
  const c10::Device device = call_device(ref, stack, first);
  const c10::DeviceGuard guard(device);
  switch (ref.kind_of_call(c10::ArrayRef<c10::IValue>(*stack).slice(first, ref.num_args()))) {
    case ReferenceOp::Kind::View:
      run_view(ref, stack, first);
      return;
    case ReferenceOp::Kind::Async:
      if (!synchronized && run_async(ref, stack, first, device)) return;
      [[fallthrough]];
    default:
      run_synchronized(ref, stack, first, device);
  }
}

} // namespace

void reference_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_reference_path(op, stack, /*synchronized=*/false);
}

void reference_fallback_synchronized(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_on_reference_path(op, stack, /*synchronized=*/true);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&reference_fallback>());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized_call>());
}

} // namespace simhpu
