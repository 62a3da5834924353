// custom_op::custom_topk(self, k, axis, bottom) -> (values, indices), registered
// when the library loads (torch.ops.load_library) with registerUserCustomOp:
// the output-meta function shapes the outputs (on the device, and as the
// operator's Meta kernel under torch.compile), the fill-params function packs
// k/axis/bottom for the kernel, and the device function calls execute().
#include <torch_simhpu/extension.h>

#include <ATen/ops/topk.h>
#include <c10/core/Scalar.h>
#include <torch/library.h>

namespace custom_topk {

using simhpu::DeviceTensor;
using simhpu::Out;
namespace custom_op = simhpu::custom_op;

struct TopkParams {
  int64_t k;
  int64_t axis;  // wrapped: 0 <= axis < dim
  bool bottom;
};

int64_t wrapped_axis(const at::Tensor& self, int64_t axis) {
  const int64_t dim = std::max<int64_t>(self.dim(), 1);
  TORCH_CHECK_INDEX(axis >= -dim && axis < dim, "custom_op::custom_topk: axis ", axis,
                    " is out of range for a tensor of ", self.dim(), " dimensions");
  return axis < 0 ? axis + dim : axis;
}

// Inputs in schema order: self, k, axis, bottom.
custom_op::PartialOutputMetaDataVector topk_meta(const custom_op::Stack& inputs) {
  const at::Tensor self = inputs[0].toTensor();
  const int64_t k = inputs[1].toScalar().toLong();
  const int64_t axis = wrapped_axis(self, inputs[2].toScalar().toLong());
  TORCH_CHECK_VALUE(self.dim() > 0, "custom_op::custom_topk: self must have at least one dimension");
  TORCH_CHECK_VALUE(k >= 0 && k <= self.size(axis), "custom_op::custom_topk: k = ", k,
                    " is out of range for a dimension of size ", self.size(axis));
  std::vector<int64_t> shape = self.sizes().vec();
  shape[axis] = k;
  return {{self.scalar_type(), shape}, {c10::ScalarType::Long, shape}};
}

std::shared_ptr<void> topk_params(const custom_op::Stack& inputs, size_t& size) {
  SIMHPU_PARAMS_STUB(TopkParams);
  params->k = inputs[1].toScalar().toLong();
  params->axis = wrapped_axis(inputs[0].toTensor(), inputs[2].toScalar().toLong());
  params->bottom = inputs[3].toBool();
  return params;
}

// The device kernel: ATen's CPU topk over the device memory (DeviceTensor::cpu_view).
void custom_topk_f32(const std::vector<DeviceTensor>& inputs, const Out<std::vector<DeviceTensor>>& outputs,
                     const custom_op::UserParams& blob) {
  const auto p = blob.as<TopkParams>();
  at::Tensor values = outputs[0].cpu_view();
  at::Tensor indices = outputs[1].cpu_view();
  at::topk_out(values, indices, inputs[0].cpu_view(), p.k, p.axis, /*largest=*/!p.bottom, /*sorted=*/true);
}
SIMHPU_KERNEL(custom_topk_f32);

std::tuple<at::Tensor, at::Tensor> custom_topk_execute(const at::Tensor& self, const c10::Scalar& k,
                                                       const c10::Scalar& axis, bool bottom) {
  TORCH_CHECK_TYPE(self.scalar_type() == at::kFloat, "custom_op::custom_topk: self must be float32, got ",
                   self.scalar_type());
  const auto& desc = custom_op::UserCustomOpDescriptor::getUserCustomOpDescriptor("custom_op::custom_topk");
  std::vector<at::Tensor> outputs = desc.execute({self, k, axis, bottom});
  return {outputs[0], outputs[1]};
}

// Runs when the library loads.
const bool registered = [] {
  custom_op::registerUserCustomOp("custom_op::custom_topk", "custom_topk_f32", topk_meta, topk_params);
  return true;
}();

} // namespace custom_topk

TORCH_LIBRARY(custom_op, m) {
  m.def("custom_topk(Tensor self, Scalar k, Scalar axis, bool bottom) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(custom_op, PrivateUse1, m) {
  m.impl("custom_topk", &custom_topk::custom_topk_execute);
}
