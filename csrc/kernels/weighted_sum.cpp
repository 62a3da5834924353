// (self * repeat + reduce(others) + bias + offset), negated when asked,
// computed in `accumulate` (default: self's dtype). It takes one argument of
// nearly every schema type, so it doubles as the probe that each type reaches
// a kernel intact; the arithmetic reuses ATen's CPU routines on device memory.
#include "generated/kernel_signatures/weighted_sum.h"
#include "kernels/kernel_api.h"

#include <ATen/ops/stack.h>

namespace simhpu::kernels {

void weighted_sum(const DeviceTensor& self, const std::vector<DeviceTensor>& others,
                  const std::optional<DeviceTensor>& bias, const std::string& reduction,
                  const std::optional<c10::Scalar>& offset, std::optional<c10::ScalarType> accumulate,
                  int64_t repeat, bool negate, const Out<DeviceTensor>& out) {
  const c10::ScalarType acc = accumulate.value_or(self.dtype);
  at::Tensor result = self.cpu_view().to(acc).mul(repeat);
  if (!others.empty()) {
    std::vector<at::Tensor> views;
    for (const auto& t : others) {
      views.push_back(t.cpu_view().to(acc));
    }
    const at::Tensor stacked = at::stack(views);
    TORCH_CHECK(reduction == "sum" || reduction == "mean" || reduction == "max",
                "unknown reduction '", reduction, "'");
    result = result.add(reduction == "sum"    ? stacked.sum(0)
                        : reduction == "mean" ? stacked.mean(0)
                                              : std::get<0>(stacked.max(0)));
  }
  if (bias.has_value()) {
    result = result.add(bias->cpu_view().to(acc));
  }
  if (offset.has_value()) {
    result = result.add(*offset);
  }
  out.cpu_view().copy_(negate ? result.neg() : result);
}
SIMHPU_KERNEL(weighted_sum);

} // namespace simhpu::kernels
