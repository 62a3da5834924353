#include "aten/fallback.h"

#include "aten/meta_cache.h"
#include "aten/op_routes.h"
#include "aten/reference_call.h"
#include "aten/reference_op.h"
#include "aten/resize.h"
#include "runtime/device.h"
#include "runtime/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/core/List.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <torch/library.h>

#include <cstring>
#include <mutex>

namespace simhpu {
namespace {

constexpr c10::DispatchKeySet kDeviceKeys(c10::DispatchKey::PrivateUse1);

// ---- Which device a call runs on (CUDA's rules) ----------------------------

[[noreturn]] void devices_differ(const ReferenceOp& ref, c10::Device a, c10::Device b, const c10::Argument& arg) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a, " and ",
              b, "! (when checking argument '", arg.name(), "' of ", ref.name, ")");
}

// Every tensor must be on one simhpu device, except CPU scalars (0-dim, not
// written) and CPU index tensors in a Tensor?[] (copied to the device, as
// CUDA does). Rewrites those index tensors in place on the stack.
c10::Device call_device(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first) {
  const auto& schema = ref.op.schema().arguments();
  std::optional<c10::Device> device;
  auto visit = [&](const at::Tensor& t) {
    if (t.defined() && t.is_privateuseone() && !device) {
      device = t.device();
    }
  };
  for (size_t i = 0; i < ref.num_args(); ++i) {
    const c10::IValue& arg = (*stack)[first + i];
    if (arg.isTensor()) {
      visit(arg.toTensor());
    } else if (arg.isList()) {
      for (const c10::IValue& e : arg.toListRef()) {
        if (e.isTensor()) visit(e.toTensor());
      }
    }
  }
  if (!device) {
    for (size_t i = 0; i < ref.num_args() && !device; ++i) {
      const c10::IValue& arg = (*stack)[first + i];
      if (arg.isDevice() && arg.toDevice().is_privateuseone()) {
        device = arg.toDevice();
      }
    }
  }
  TORCH_CHECK(device.has_value(), ref.name, ": reached the simhpu device with no simhpu tensor or device argument");
  if (!device->has_index()) {
    device = device_of(current_device());
  }
  check_device_index(device->index(), ref.name.c_str());

  auto check = [&](const at::Tensor& t, size_t i, bool may_be_scalar) {
    if (!t.defined() || t.device() == *device) return;
    if (may_be_scalar && t.is_cpu() && t.dim() == 0) return;
    devices_differ(ref, *device, t.device(), schema[i]);
  };
  for (size_t i = 0; i < ref.num_args(); ++i) {
    c10::IValue& arg = (*stack)[first + i];
    switch (ref.args[i]) {
      case ReferenceOp::Arg::Tensor:
        if (arg.isTensor()) check(arg.toTensor(), i, !ref.arg_written[i]);
        break;
      case ReferenceOp::Arg::TensorList:
        for (const c10::IValue& e : arg.toListRef()) check(e.toTensor(), i, false);
        break;
      case ReferenceOp::Arg::OptionalTensorList: {
        if (arg.isNone()) break;
        bool moved = false;
        c10::List<std::optional<at::Tensor>> list;
        for (const c10::IValue& e : arg.toListRef()) {
          if (e.isTensor() && e.toTensor().defined() && e.toTensor().is_cpu()) {
            list.push_back(e.toTensor().to(*device));
            moved = true;
          } else {
            if (e.isTensor()) check(e.toTensor(), i, false);
            list.push_back(e.isTensor() ? std::optional<at::Tensor>(e.toTensor()) : std::nullopt);
          }
        }
        if (moved) arg = std::move(list);
        break;
      }
      default:
        break;
    }
  }
  return *device;
}

// ---- Meta: the outputs' metadata before anything runs -----------------------

// Meta tensors with the callers' sizes, strides and offsets; tensors sharing a
// storage share a meta storage, so the meta kernel's overlap checks see them.
class MetaArguments {
 public:
  c10::IValue value(const c10::IValue& arg, ReferenceOp::Arg kind) {
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
      case ReferenceOp::Arg::Other:
        return arg.isDevice() && arg.toDevice().is_privateuseone() ? c10::IValue(c10::Device(c10::kMeta)) : arg;
    }
    return arg;
  }

  at::Tensor meta(const at::Tensor& t) {
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

 private:
  c10::Storage storage_for(const c10::Storage& device_storage) {
    for (auto& [impl, storage] : storages_) {
      if (impl == device_storage.unsafeGetStorageImpl()) return storage;
    }
    c10::Storage storage(c10::Storage::use_byte_size_t(), device_storage.nbytes(),
                         c10::DataPtr(nullptr, c10::Device(c10::kMeta)), at::GetAllocator(c10::kMeta),
                         /*resizable=*/true);
    storages_.emplace_back(device_storage.unsafeGetStorageImpl(), storage);
    return storage;
  }

  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 4> storages_;
  c10::SmallVector<std::pair<const c10::TensorImpl*, at::Tensor>, 4> tensors_;
};

// Runs the meta kernel on `meta_stack`; false when it cannot tell the
// outputs: it needs the data, has no answer for these arguments, or rejects
// them. The call then runs synchronised, where the CPU kernel has the last
// word (its result, or its error).
bool run_meta(const ReferenceOp& ref, torch::jit::Stack& meta_stack) {
  try {
    ref.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

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

// ---- The three routes ------------------------------------------------------

void run_view(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first) {
  MetaArguments meta;
  torch::jit::Stack meta_stack;
  for (size_t i = 0; i < ref.num_args(); ++i) meta_stack.push_back(meta.value((*stack)[first + i], ref.args[i]));
  if (!run_meta(ref, meta_stack)) {
    // The meta kernel rejected the arguments: run it again for its error.
    ref.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  }
  auto make_view = [&](const at::Tensor& base, const at::Tensor& shape) {
    auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(base.storage()),
                                                     base.key_set(), shape.dtype());
    impl->set_sizes_and_strides(shape.sizes(), shape.strides(), shape.storage_offset());
    at::Tensor view(std::move(impl));
    view._set_conj(shape.is_conj());
    view._set_neg(shape.is_neg());
    return view;
  };
  std::vector<c10::IValue> results;
  for (size_t r = 0; r < ref.return_alias.size(); ++r) {
    const int base_index = ref.return_alias[r];
    TORCH_INTERNAL_ASSERT(base_index >= 0, ref.name, ": a view whose base argument is unknown");
    const at::Tensor& base = (*stack)[first + base_index].toTensor();
    if (meta_stack[r].isTensor()) {
      results.emplace_back(make_view(base, meta_stack[r].toTensor()));
    } else {
      c10::List<at::Tensor> views;
      for (const at::Tensor& shape : meta_stack[r].toTensorVector()) views.push_back(make_view(base, shape));
      results.emplace_back(std::move(views));
    }
  }
  torch::jit::drop(*stack, ref.num_args());
  for (auto& r : results) stack->push_back(std::move(r));
  count_route(ref.name.c_str(), Route::Dedicated);
}

void fill_record(LaunchRecord& record, const ReferenceOp& ref) {
  record.kernel = &reference_kernel();
  record.op_name = ref.name.c_str();
  record.payload = &ref;
}

// An empty out= tensor asks the kernel to size it; out= kernels that do so
// their own way (and not as their meta kernels say) are common enough that
// such calls take the synchronised route, where the CPU kernel may resize.
bool has_empty_out_argument(const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (ref.arg_is_out[i] && args[i].isTensor() && args[i].toTensor().defined() &&
        args[i].toTensor().storage().nbytes() == 0) {
      return true;
    }
  }
  return false;
}

// The outcome of a meta kernel run on the call's arguments; nullopt when it
// cannot tell (see run_meta) or resizes a tensor that holds data.
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

at::Tensor allocate(const TensorShape& shape) {
  if (shape.dtype == c10::ScalarType::Undefined) return at::Tensor();
  return at::detail::empty_strided_generic(shape.sizes, shape.strides, at::GetAllocator(at::kPrivateUse1),
                                           kDeviceKeys, shape.dtype);
}

c10::IValue allocate_return(const MetaOutcome::Return& r) {
  if (const auto* shape = std::get_if<TensorShape>(&r)) {
    return allocate(*shape);
  }
  if (const auto* shapes = std::get_if<std::vector<TensorShape>>(&r)) {
    c10::List<at::Tensor> out;
    for (const auto& s : *shapes) out.push_back(allocate(s));
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

void run_synchronized(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first, c10::Device device);

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

bool run_async(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first, c10::Device device) {
  const auto args = c10::ArrayRef<c10::IValue>(*stack).slice(first, ref.num_args());
  const EmptyOuts empty = empty_outs(ref, args);
  if (empty == EmptyOuts::Distrusted || (ref.meta_differs != nullptr && ref.meta_differs(args))) {
    return false;
  }
  MetaSignature signature;
  const bool cacheable = signature.build(ref, args);
  const MetaOutcome* outcome = cacheable ? cached_meta(signature) : nullptr;
  std::optional<MetaOutcome> fresh;
  if (outcome == nullptr) {
    fresh = ask_meta(ref, args);
    if (!fresh) return false;
    if (empty == EmptyOuts::Learn) return run_synchronized_and_learn(ref, stack, first, device, *fresh);
    if (cacheable) remember_meta(std::move(signature), *fresh);
    outcome = &*fresh;
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
  const LaunchSite site = capture_launch_site();  // before the slot: it may take the GIL
  {
    LaunchSlot slot(device.index());
    LaunchRecord& record = slot.record();
    fill_record(record, ref);
    record.site = site;
    encode_arguments(record, ref, args, device);
    encode_outputs(record, fresh_outputs);
    slot.commit();
  }
  torch::jit::drop(*stack, ref.num_args());
  for (auto& r : results) stack->push_back(std::move(r));
  count_route(ref.name.c_str(), Route::Reference);
  return true;
}

// A kernel that draws from the CPU's default generator without taking one as
// an argument: seed that generator from the device's for the call, then put
// its state back, so torch.simhpu.manual_seed governs it and the CPU's
// sequence is untouched.
template <typename Body>
void with_device_seeded_cpu_generator(c10::Device device, Body body) {
  uint64_t seed;
  {
    auto* g = default_generator(device.index()).get<SimhpuGenerator>();
    std::lock_guard<std::mutex> lock(g->mutex_);
    seed = g->engine().get<at::CPUGeneratorImpl>()->random64();
  }
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  c10::intrusive_ptr<c10::TensorImpl> saved;
  {
    std::lock_guard<std::mutex> lock(cpu.mutex());
    saved = cpu.get_state().getIntrusivePtr();
    cpu.set_current_seed(seed);
  }
  try {
    body();
  } catch (...) {
    std::lock_guard<std::mutex> lock(cpu.mutex());
    cpu.set_state(at::Tensor(saved));
    throw;
  }
  std::lock_guard<std::mutex> lock(cpu.mutex());
  cpu.set_state(at::Tensor(saved));
}

at::Tensor to_device(const at::Tensor& host_result, c10::Device device) {
  if (!host_result.defined()) return host_result;
  const at::Tensor dense =
      host_result.is_non_overlapping_and_dense() ? host_result : host_result.contiguous();
  at::Tensor out = allocate(TensorShape::of(dense));
  host_alias(out).copy_(dense);
  return out;
}

// A written device tensor as a CPU tensor the kernel may resize (CPU kernels
// resize out= tensors, and some in-place kernels their self); written back after.
at::Tensor resizable_host_copy(const at::Tensor& device_tensor) {
  at::Tensor copy = at::empty_strided(device_tensor.sizes(), device_tensor.strides(),
                                      device_tensor.options().device(at::kCPU));
  copy.copy_(host_alias(device_tensor));
  return copy;
}

void write_back(const at::Tensor& device_tensor, const at::Tensor& host) {
  if (device_tensor.sizes() != host.sizes() || device_tensor.strides() != host.strides()) {
    device_tensor.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(),
                                                               device_tensor.storage_offset());
    ensure_storage_fits(device_tensor);
  }
  host_alias(device_tensor).copy_(host);
}

void run_synchronized(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first, c10::Device device) {
  const auto args = c10::ArrayRef<c10::IValue>(*stack).slice(first, ref.num_args());
  synchronize_stream(current_stream(device.index()));
  std::vector<c10::IValue> call_args(args.begin(), args.end());
  std::vector<std::pair<size_t, at::Tensor>> outs;  // written arguments, by host copy
  for (size_t i = 0; i < args.size(); ++i) {
    if (ref.arg_written[i] && args[i].isTensor() && args[i].toTensor().defined()) {
      outs.emplace_back(i, resizable_host_copy(args[i].toTensor()));
    }
  }
  // The copy stands for its tensor wherever that is passed (self and out= may be one).
  for (auto& arg : call_args) {
    for (const auto& [i, host] : outs) {
      if (arg.isTensor() && arg.toTensor().unsafeGetTensorImpl() == args[i].toTensor().unsafeGetTensorImpl()) {
        arg = host;
      }
    }
  }
  LaunchRecord record;
  fill_record(record, ref);
  encode_arguments(record, ref, call_args, device, /*snapshot_host_tensors=*/false);
  torch::jit::Stack host_results;
  auto run = [&] {
    try {
      host_results = run_reference_call(record, /*fill_outputs=*/false);
    } catch (c10::Error& e) {
      e.add_context("simhpu: while running " + ref.name + " on the reference path");
      throw;
    }
  };
  if (ref.hidden_randomness) {
    with_device_seeded_cpu_generator(device, run);
  } else {
    run();
  }
  for (const auto& [i, host] : outs) {
    write_back(args[i].toTensor(), host);
  }
  std::vector<c10::IValue> results;
  for (size_t r = 0; r < ref.return_alias.size(); ++r) {
    const c10::IValue& h = host_results[r];
    if (ref.return_alias[r] >= 0) {
      results.push_back(args[ref.return_alias[r]]);
    } else if (h.isTensor()) {
      results.emplace_back(to_device(h.toTensor(), device));
    } else if (h.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : h.toTensorVector()) list.push_back(to_device(t, device));
      results.emplace_back(std::move(list));
    } else {
      results.push_back(h);
    }
  }
  torch::jit::drop(*stack, ref.num_args());
  for (auto& r : results) stack->push_back(std::move(r));
  count_route(ref.name.c_str(), Route::Synchronized);
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
  // the two may differ (native_layer_norm decomposes, addr checks less), and
  // the device is to behave as the CPU does: such ops take the reference path.
  static auto* library = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                            __FILE__, __LINE__);
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || name.name.rfind("aten::", 0) != 0 || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) {
      continue;
    }
    const std::string qualified = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    library->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&reference_fallback>());
  }
}

void reference_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
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
  const c10::Device device = call_device(ref, stack, first);
  const c10::DeviceGuard guard(device);
  switch (ref.kind) {
    case ReferenceOp::Kind::View:
      run_view(ref, stack, first);
      return;
    case ReferenceOp::Kind::Async:
      if (run_async(ref, stack, first, device)) return;
      [[fallthrough]];
    default:
      run_synchronized(ref, stack, first, device);
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&reference_fallback>());
}

} // namespace simhpu
