#pragma once
// Operators registered at run time, without codegen, in the manner of Intel
// Gaudi's PyTorch CustomOp API. A library (loaded with torch.ops.load_library)
// defines the schema with TORCH_LIBRARY, registers how to shape the outputs and
// which device kernel computes them, and its PrivateUse1 function calls execute():
//
//   registerUserCustomOp("custom_op::custom_topk", "custom_topk_f32", topk_meta, topk_params);
//   auto outputs = UserCustomOpDescriptor::getUserCustomOpDescriptor("custom_op::custom_topk")
//                      .execute({self, k, axis, bottom});
//
// The output-meta function is also the operator's Meta kernel, so torch.compile
// needs nothing more. The kernel receives the tensor inputs, the outputs and the
// parameter blob:
//
//   void custom_topk_f32(const std::vector<DeviceTensor>& inputs,
//                        const Out<std::vector<DeviceTensor>>& outputs, const UserParams& params);
//   SIMHPU_KERNEL(custom_topk_f32);
#include "runtime/build_info.h"
#include "runtime/kernel_arg.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace simhpu {

// The dtype and shape of one output.
struct PartialOutputMetaData {
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> shape;
};
using PartialOutputMetaDataVector = std::vector<PartialOutputMetaData>;

namespace custom_op {

using simhpu::PartialOutputMetaData;
using simhpu::PartialOutputMetaDataVector;
// An operator's arguments in schema order (the same type as at::Stack / torch::jit::Stack).
using Stack = std::vector<c10::IValue>;

// The outputs' dtypes and shapes from the call's arguments (schema order).
using OutputMetaFn = std::function<PartialOutputMetaDataVector(const Stack&)>;
// The kernel's parameter blob from the call's arguments; sets `size` to its
// size in bytes. May be null: the kernel then gets an empty blob.
using FillParamsFn = std::function<std::shared_ptr<void>(const Stack&, size_t&)>;

// Allocates the parameter struct inside a FillParamsFn and sets `size`.
#define SIMHPU_PARAMS_STUB(struct_name) \
  size = sizeof(struct_name);           \
  auto params = std::make_shared<struct_name>()

class UserCustomOpDescriptor {
 public:
  UserCustomOpDescriptor(std::string schema, std::string kernel, OutputMetaFn output_meta,
                         FillParamsFn fill_params);

  // Runs the operator on the device: shapes the outputs, allocates them on the
  // first tensor input's device, fills the parameters and queues the kernel.
  // `inputs` are the operator's arguments in schema order.
  std::vector<at::Tensor> execute(const std::vector<c10::IValue>& inputs) const;

  // The outputs' metadata for `inputs`; errors name the operator.
  PartialOutputMetaDataVector output_meta(const Stack& inputs) const;

  // The descriptor registered for `op` ("namespace::name"); throws naming it if none.
  static const UserCustomOpDescriptor& getUserCustomOpDescriptor(const std::string& op);

  const std::string& getSchemaName() const { return schema_; }
  const std::string& getKernelName() const { return kernel_; }
  const OutputMetaFn& getOutputMetaFn() const { return output_meta_fn_; }
  const FillParamsFn& getFillParamsFn() const { return fill_params_fn_; }

 private:
  std::string schema_;
  std::string kernel_;
  OutputMetaFn output_meta_fn_;
  FillParamsFn fill_params_fn_;
};

// Registers `schema` ("namespace::name", defined with TORCH_LIBRARY) to run
// device kernel `kernel`, and its Meta kernel from `output_meta_fn`. Called
// while a library loads; `built` is what that library was compiled against.
// Never throws: a registration with a problem (a malformed name, no
// OutputMetaFn, a name registered twice, another release) is refused, and
// getUserCustomOpDescriptor raises why.
void registerUserCustomOp(const std::string& schema, const std::string& kernel, OutputMetaFn output_meta_fn,
                          FillParamsFn fill_params_fn = nullptr, const BuildInfo& built = SIMHPU_THIS_BUILD);

// The parameter blob a user kernel receives (a copy, owned by the launch).
struct UserParams {
  std::string bytes;

  size_t size() const { return bytes.size(); }
  // The blob as the struct a FillParamsFn filled; checks the size.
  template <typename T>
  T as() const {
    TORCH_CHECK(bytes.size() == sizeof(T), "kernel parameters: the blob holds ", bytes.size(),
                " bytes, the kernel reads a struct of ", sizeof(T));
    T value;
    std::memcpy(&value, bytes.data(), sizeof(T));
    return value;
  }
};

// Queues device kernel `kernel` for operator `op` (a name that lives as long
// as the process: errors of the launch name it later) on the inputs' device's
// current stream: the tensor inputs, the outputs (written) and the parameter
// blob. What execute() does after shaping; also torch_simhpu.library's launch.
void launch_user_kernel(const char* op, const std::string& kernel, const std::vector<at::Tensor>& inputs,
                        const std::vector<at::Tensor>& outputs, std::string params);

} // namespace custom_op

namespace detail {
template <typename Param>
struct ArgFrom;

// A user kernel's parameter blob travels as a string argument.
template <>
struct ArgFrom<custom_op::UserParams> {
  static custom_op::UserParams get(const KernelArg& arg, size_t index) {
    const std::string* bytes = std::get_if<std::string>(&arg);
    TORCH_CHECK(bytes != nullptr, "argument ", index, " should be the kernel's parameter blob");
    return custom_op::UserParams{*bytes};
  }
};
template <>
struct ArgFrom<const custom_op::UserParams&> : ArgFrom<custom_op::UserParams> {};
} // namespace detail

} // namespace simhpu
