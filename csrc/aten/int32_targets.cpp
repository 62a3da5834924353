#include "aten/int32_targets.h"

#include <ATen/core/Tensor.h>

#include <atomic>
#include <string_view>

namespace simhpu {
namespace {

std::atomic<bool> enabled{false};

} // namespace

bool takes_int32_target(const std::string& name) {
  static constexpr std::string_view kLosses[] = {
      "aten::nll_loss_forward", "aten::nll_loss_backward", "aten::nll_loss2d_forward", "aten::nll_loss2d_backward",
      "aten::multilabel_margin_loss_forward", "aten::multilabel_margin_loss_backward",
  };
  for (std::string_view loss : kLosses) {
    if (name == loss) return true;
  }
  return false;
}

void set_int32_targets(bool on) { enabled.store(on); }
bool int32_targets() { return enabled.load(); }

void widen_int32_target(const ReferenceOp& ref, torch::jit::Stack& stack, size_t first) {
  if (!enabled.load(std::memory_order_relaxed) || !takes_int32_target(ref.op.schema().name())) return;
  const auto& arguments = ref.op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& arg = stack[first + i];
    if (arguments[i].name() == "target" && arg.isTensor() && arg.toTensor().scalar_type() == at::kInt) {
      arg = arg.toTensor().to(at::kLong);
    }
  }
}

} // namespace simhpu
