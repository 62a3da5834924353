// npu_add_rms_norm: the residual add fused in front of RMS normalisation, as
// transformer blocks use it (Ascend ships the same fusion): total = x + residual,
// y = rms_norm(total) * gamma. Two kernels from one adapter, which no single
// exec: line can say. codegen still writes everything around this function:
// the checks, the outputs, the out= variant, autograd, the fake kernel.
#include "aten/exec_cmd.h"
#include "generated/op_plugin.h"

namespace simhpu::op_plugin {

void add_rms_norm(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& gamma, double eps,
                  const at::Tensor& y, const at::Tensor& rstd, const at::Tensor& total) {
  constexpr const char* kOpName = "npu_add_rms_norm";
  // Same stream, so the second kernel reads `total` after the first wrote it.
  EXEC_CMD_FOR(kOpName, add_custom, x, residual, written(total));
  EXEC_CMD_FOR(kOpName, rms_norm, total, gamma, eps, written(y), written(rstd));
}
SIMHPU_OP_PLUGIN(add_rms_norm);

} // namespace simhpu::op_plugin
