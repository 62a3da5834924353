#include "aten/call_device.h"

#include "aten/op_rules.h"
#include "runtime/device.h"

#include <ATen/core/List.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>

namespace simhpu {
namespace {

[[noreturn]] void devices_differ(const ReferenceOp& ref, c10::Device a, c10::Device b, const c10::Argument& arg) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a, " and ",
              b, "! (when checking argument '", arg.name(), "' of ", ref.name, ")");
}

} // namespace

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
            // A private copy only this launch reads: staged and queued, no host wait.
            list.push_back(rules::staged_to_device(e.toTensor(), *device, e.toTensor().scalar_type()));
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

bool ran_where_self_is(const c10::OperatorHandle& op, const ReferenceOp& ref, torch::jit::Stack* stack, size_t first) {
  if (ref.num_args() == 0 || ref.args[0] != ReferenceOp::Arg::Tensor) return false;
  const c10::IValue& self = (*stack)[first];
  if (!self.isTensor() || !self.toTensor().defined() || !self.toTensor().is_cpu()) return false;
  std::optional<size_t> indices;
  for (size_t i = 0; i < ref.num_args(); ++i) {
    const c10::IValue& arg = (*stack)[first + i];
    const bool on_device = arg.isTensor() ? arg.toTensor().is_privateuseone()
        : arg.isList() && std::any_of(arg.toListRef().begin(), arg.toListRef().end(), [](const c10::IValue& e) {
            return e.isTensor() && e.toTensor().is_privateuseone();
          });
    if (!on_device) continue;
    if (ref.args[i] != ReferenceOp::Arg::OptionalTensorList || indices) return false;
    indices = i;
  }
  if (!indices) return false;
  c10::List<std::optional<at::Tensor>> on_host;
  for (const c10::IValue& e : (*stack)[first + *indices].toListRef()) {
    on_host.push_back(e.isTensor() ? std::optional<at::Tensor>(e.toTensor().cpu()) : std::nullopt);
  }
  (*stack)[first + *indices] = std::move(on_host);
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  return true;
}

} // namespace simhpu
