#include "aten/synchronized_call.h"

#include "aten/meta_call.h"
#include "aten/op_routes.h"
#include "aten/reference_call.h"
#include "aten/resize.h"
#include "aten/sparse.h"
#include "runtime/generator.h"
#include "runtime/launch_site.h"
#include "runtime/observers.h"
#include "runtime/streams.h"
#include "runtime/undefined_memory.h"


#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/List.h>
#include <ATen/ops/empty_strided.h>

#include <mutex>
#include <stdexcept>

namespace simhpu {
namespace {

// A kernel that draws from the CPU's default generator without taking one as
// an argument: seed that generator from the device's for the call, then put
// its state back, so torch.simhpu.manual_seed governs it and the CPU's
// sequence is untouched.
template <typename Body>
void with_device_seeded_cpu_generator(c10::Device device, Body body) {
  const uint64_t seed = take_launch_seed(default_generator(device.index()), 4);
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
  if (is_sparse_layout(host_result)) return sparse_to_device(host_result, device);
  const at::Tensor dense =
      host_result.is_non_overlapping_and_dense() ? host_result : host_result.contiguous();
  at::Tensor out = empty_device_tensor(TensorShape::of(dense));
  describe_tensor(out).cpu_view().copy_(dense);
  return out;
}

// A written device tensor as a CPU tensor the kernel may resize (CPU kernels
// resize out= tensors, and some in-place kernels their self); written back after.
at::Tensor resizable_host_copy(const at::Tensor& device_tensor) {
  at::Tensor copy = at::empty_strided(device_tensor.sizes(), device_tensor.strides(),
                                      device_tensor.options().device(at::kCPU));
  copy.copy_(describe_tensor(device_tensor).cpu_view());
  return copy;
}

void write_back(const at::Tensor& device_tensor, const at::Tensor& host) {
  if (device_tensor.sizes() != host.sizes() || device_tensor.strides() != host.strides()) {
    device_tensor.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(),
                                                               device_tensor.storage_offset());
    ensure_storage_fits(device_tensor);
    // A grown storage's old bytes are copied on the stream: the host writes after.
    synchronize_stream(current_stream(device_tensor.device().index()));
  }
  describe_tensor(device_tensor).cpu_view().copy_(host);
}

// The most a call's placeholder inputs may take on the host (see run_for_shapes).
constexpr int64_t kMostPlaceholderBytes = int64_t{1} << 28;

// A device tensor's stand-in on the host: its shape and dtype, placeholder values (ones for
// floating point, zeros for integers: valid indices), the same as phantom execution's host reads.
at::Tensor placeholder_of(const at::Tensor& t) {
  at::Tensor host = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
  host.fill_(c10::isIntegralType(t.scalar_type(), /*includeBool=*/true) ? 0 : 1);
  return host;
}

// A device tensor's values on the host, laid out as on the device: a copy of the memory
// its elements span, viewed with its strides (an expanded tensor's elements share memory,
// which no copy into a tensor of those strides could write).
at::Tensor host_copy_of(const at::Tensor& t) {
  const at::Tensor device_view = describe_tensor(t).cpu_view();
  int64_t span = t.numel() > 0 ? 1 : 0;
  for (int64_t d = 0; d < t.dim() && t.numel() > 0; ++d) span += (t.size(d) - 1) * t.stride(d);
  at::Tensor memory = at::empty({span}, t.options().device(at::kCPU));
  memory.copy_(device_view.as_strided({span}, {1}, device_view.storage_offset()));
  return memory.as_strided(t.sizes(), t.strides(), 0);
}

// While values are not computed (phantom execution), an operator the host would compute whose
// results' shapes do not depend on its inputs' values (it has no meta kernel: cummax, geqrf,
// histogram's bin edges, ...) runs its CPU kernel on placeholder inputs of its inputs' shapes, to
// learn its results' shapes; the device gets results of those shapes, unwritten, and the launch
// is priced like any other. Where the observers standing in for values know the inputs'
// (`known`), the CPU kernel runs on those, so a result whose shape depends on them (nonzero's)
// has its true shape, and the launch, over known inputs, computes it. False where that cannot
// stand for the call (its shapes depend on unknown values, it returns a value, a sparse result,
// or its inputs are too large to stand in for).
bool run_for_shapes(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first, c10::Device device, bool known) {
  if (observers::values_computed() || (ref.shapes_depend_on_values && !known)) return false;
  const auto args = c10::ArrayRef<c10::IValue>(*stack).slice(first, ref.num_args());
  int64_t bytes = 0;
  auto stand_in = [&](const c10::IValue& v) -> c10::IValue {
    if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_privateuseone()) return v;
    if (is_sparse_layout(v.toTensor())) throw std::invalid_argument("sparse");
    bytes += static_cast<int64_t>(v.toTensor().nbytes());
    return known ? host_copy_of(v.toTensor()) : placeholder_of(v.toTensor());
  };
  std::vector<c10::IValue> call_args;
  try {
    for (const c10::IValue& arg : args) {
      if (arg.isTensorList()) {
        c10::List<at::Tensor> list;
        for (const at::Tensor& t : arg.toTensorVector()) list.push_back(stand_in(t).toTensor());
        call_args.emplace_back(std::move(list));
      } else if (arg.isList()) {
        for (const c10::IValue& element : arg.toListRef()) {
          if (element.isTensor()) return false;  // (a list of optional tensors: not stood in for)
        }
        call_args.push_back(arg);
      } else {
        call_args.push_back(stand_in(arg));
      }
    }
  } catch (const std::invalid_argument&) {
    return false;
  }
  if (bytes > kMostPlaceholderBytes) return false;
  torch::jit::Stack host(call_args.begin(), call_args.end());
  try {
    ref.op.callBoxed(&host);
  } catch (const c10::Error&) {
    return false;  // (placeholder values the kernel refuses, a singular matrix: the call is refused as before)
  }
  for (size_t r = 0; r < ref.return_alias.size(); ++r) {
    const c10::IValue& h = host[r];
    if (ref.return_alias[r] < 0 && !(h.isTensor() || h.isTensorList() || h.isNone())) return false;  // (a value)
    if (h.isTensor() && h.toTensor().defined() && is_sparse_layout(h.toTensor())) return false;
  }
  for (size_t i = 0; i < args.size(); ++i) {  // written arguments take the shapes the kernel gave them
    if (!ref.arg_written[i] || !args[i].isTensor() || !args[i].toTensor().defined()) continue;
    const at::Tensor& t = args[i].toTensor();
    const at::Tensor& h = call_args[i].toTensor();
    if (t.sizes() != h.sizes() || t.strides() != h.strides()) {
      t.unsafeGetTensorImpl()->set_sizes_and_strides(h.sizes(), h.strides(), t.storage_offset());
      ensure_storage_fits(t);
    }
  }
  std::vector<c10::IValue> results, fresh_outputs;
  auto fresh = [&](const at::Tensor& h) {
    return h.defined() ? empty_device_tensor(TensorShape::of(h.is_non_overlapping_and_dense() ? h : h.contiguous()))
                       : h;
  };
  for (size_t r = 0; r < ref.return_alias.size(); ++r) {
    const c10::IValue& h = host[r];
    if (ref.return_alias[r] >= 0) {
      results.push_back(args[ref.return_alias[r]]);
    } else if (h.isTensor()) {
      results.emplace_back(fresh(h.toTensor()));
      fresh_outputs.push_back(results.back());
    } else if (h.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : h.toTensorVector()) list.push_back(fresh(t));
      results.emplace_back(list);
      fresh_outputs.push_back(results.back());
    } else {
      results.push_back(h);
    }
  }
  launch_reference_call(ref, stack, device, std::move(results), fresh_outputs);
  count_route(ref.name.c_str(), Route::Reference);
  return true;
}

} // namespace

void run_synchronized(const ReferenceOp& ref, torch::jit::Stack* stack, size_t first, c10::Device device) {
  const auto args = c10::ArrayRef<c10::IValue>(*stack).slice(first, ref.num_args());
  const bool known = observers::values_known(args);
  if (run_for_shapes(ref, stack, first, device, known)) return;
  // (values not computed: an observer may refuse; known to it, the call runs as ever)
  if (!known) observers::before_host_compute(ref.name.c_str());
  synchronize_stream(current_stream(device.index()));
  // The host reads these now (and writes what the call writes): observers (the
  // sanitizer) check that other streams' work on them is ordered before.
  auto host_uses = [&](const at::Tensor& t, bool write) {
    check_defined(t, ref.name.c_str());
    if (observers::watched() && t.defined() && t.is_privateuseone()) {
      observers::on_host_access(describe_tensor(t), write, ref.name.c_str());
    }
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const bool write = ref.arg_written[i] || ref.writes_unannounced(i, args);
    if (args[i].isTensor()) {
      host_uses(args[i].toTensor(), write);
    } else if (args[i].isList()) {
      for (const c10::IValue& element : args[i].toListRef()) {
        if (element.isTensor()) {
          host_uses(element.toTensor(), write);
        }
      }
    }
  }
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
  begin_reference_record(record, ref);
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

} // namespace simhpu
