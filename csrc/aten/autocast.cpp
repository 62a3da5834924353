// torch.autocast("simhpu", dtype=...): matmul-like ops run in the lower
// precision, precision-sensitive ones in float32, using ATen's own op lists and
// casting wrappers for the PrivateUse1 autocast key; every other op passes through.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

#define SIMHPU_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define SIMHPU_FLOAT32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(SIMHPU_LOWER_PRECISION)
  AT_FORALL_FP32(SIMHPU_FLOAT32)
}

} // namespace
