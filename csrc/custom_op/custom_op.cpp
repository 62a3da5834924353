#include "custom_op/custom_op.h"

#include "aten/exec_cmd.h"
#include "runtime/kernel_registry.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <map>
#include <mutex>

namespace simhpu::custom_op {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<UserCustomOpDescriptor>> ops;  // node-based: references stay valid
  // Registrations refused while a library loaded (where nothing can be raised
  // to Python): op -> why, raised when the op is looked up.
  std::map<std::string, std::string> refused;
  std::vector<std::unique_ptr<torch::Library>> libraries;  // the Meta registrations, kept alive
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// "ns::name" or "ns::name.overload" -> the position of "::"; npos for anything else.
size_t namespace_end(const std::string& op) {
  const auto sep = op.find("::");
  return sep != std::string::npos && sep > 0 && sep + 2 < op.size() ? sep : std::string::npos;
}

// Why `schema` cannot be registered, or "" (the registry's lock is held).
std::string registration_problem(const Registry& r, const std::string& schema, const OutputMetaFn& output_meta_fn,
                                 const BuildInfo& built) {
  if (namespace_end(schema) == std::string::npos) {
    return "registerUserCustomOp: expected the operator as 'namespace::name' (as defined with TORCH_LIBRARY), "
           "got '" + schema + "'";
  }
  if (output_meta_fn == nullptr) {
    return "registerUserCustomOp(" + schema +
        "): an OutputMetaFn is required (it shapes the outputs on the device and under torch.compile)";
  }
  if (r.ops.count(schema) || r.refused.count(schema)) {
    return "registerUserCustomOp: '" + schema + "' is registered twice (by two libraries, or twice in one)";
  }
  return build_mismatch(built, "custom op '" + schema + "'");
}

// The one device every tensor is on, a simhpu device; errors name `op`.
c10::Device common_simhpu_device(const char* op, std::initializer_list<const std::vector<at::Tensor>*> lists) {
  const std::vector<at::Tensor>* first = *lists.begin();
  TORCH_CHECK_VALUE(!first->empty(), op, ": needs at least one tensor input to run on");
  const c10::Device device = first->front().device();
  TORCH_CHECK_VALUE(device.is_privateuseone(), op, ": expected simhpu tensors, got a tensor on ", device);
  for (const auto* list : lists) {
    for (const auto& t : *list) {
      TORCH_CHECK_VALUE(t.device() == device, op, ": a tensor is on ", t.device(), ", expected every tensor on ",
                        device);
    }
  }
  return device;
}

std::string message_of(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

// Raises `what` about `op`, as the same Python exception type as `e` would be
// (a ValueError from an OutputMetaFn stays a ValueError).
[[noreturn]] void rethrow_for(const std::string& op, const char* what, const std::exception& e) {
  const std::string message = op + ": its " + what + " failed: " + message_of(e);
  if (dynamic_cast<const c10::ValueError*>(&e)) TORCH_CHECK_VALUE(false, message);
  if (dynamic_cast<const c10::IndexError*>(&e)) TORCH_CHECK_INDEX(false, message);
  if (dynamic_cast<const c10::TypeError*>(&e)) TORCH_CHECK_TYPE(false, message);
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) TORCH_CHECK_NOT_IMPLEMENTED(false, message);
  TORCH_CHECK(false, message);
}

bool has_symbolic_shape(const at::Stack& stack) {
  for (const auto& v : stack) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
      return true;
    }
  }
  return false;
}

// The Meta kernel of a registered op: the OutputMetaFn's shapes, on the meta
// device. FakeTensorMode (torch.compile) runs it.
void run_output_meta(const c10::OperatorHandle& op, c10::Stack* stack) {
  const auto& schema = op.schema();
  const std::string name = schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  const auto& desc = UserCustomOpDescriptor::getUserCustomOpDescriptor(name);
  const size_t n = schema.arguments().size();
  at::Stack args(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  TORCH_CHECK_NOT_IMPLEMENTED(!has_symbolic_shape(args), name,
                              ": its OutputMetaFn reads concrete shapes, and this call has symbolic ones "
                              "(torch.compile with dynamic shapes); compile with dynamic=False, or give the "
                              "operator a fake kernel of its own (torch.library.register_fake)");
  PartialOutputMetaDataVector metas = desc.output_meta(args);
  torch::jit::drop(*stack, n);
  for (const auto& meta : metas) {
    torch::jit::push(*stack, at::empty(meta.shape, at::TensorOptions().dtype(meta.dtype).device(at::kMeta)));
  }
}

} // namespace

UserCustomOpDescriptor::UserCustomOpDescriptor(std::string schema, std::string kernel, OutputMetaFn output_meta,
                                               FillParamsFn fill_params)
    : schema_(std::move(schema)),
      kernel_(std::move(kernel)),
      output_meta_fn_(std::move(output_meta)),
      fill_params_fn_(std::move(fill_params)) {}

// Runs while a library loads, where an exception would end the process: a
// registration with a problem is kept as refused, and using the op raises why.
// A name registered twice is refused altogether (neither registration is used).
void registerUserCustomOp(const std::string& schema, const std::string& kernel, OutputMetaFn output_meta_fn,
                          FillParamsFn fill_params_fn, const BuildInfo& built) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::string problem = registration_problem(r, schema, output_meta_fn, built);
  if (!problem.empty()) {
    r.ops.erase(schema);
    r.refused[schema] = std::move(problem);
    return;
  }
  r.ops.emplace(schema, std::make_unique<UserCustomOpDescriptor>(schema, kernel, std::move(output_meta_fn),
                                                                 std::move(fill_params_fn)));
  const size_t sep = namespace_end(schema);
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, schema.substr(0, sep),
                                                  c10::DispatchKey::Meta, "custom_op/custom_op.cpp", __LINE__);
  library->impl(schema.substr(sep + 2).c_str(), torch::CppFunction::makeFromBoxedFunction<&run_output_meta>());
  r.libraries.push_back(std::move(library));
}

const UserCustomOpDescriptor& UserCustomOpDescriptor::getUserCustomOpDescriptor(const std::string& op) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto refused = r.refused.find(op);
  TORCH_CHECK(refused == r.refused.end(), op, ": ", refused->second);
  auto it = r.ops.find(op);
  if (it == r.ops.end()) {
    std::string known;
    for (const auto& entry : r.ops) {
      known += (known.empty() ? "" : ", ") + entry.first;
    }
    TORCH_CHECK(false, "getUserCustomOpDescriptor: no custom op '", op,
                "' is registered; register it with registerUserCustomOp in the library that defines it "
                "(registered: ", known.empty() ? "none" : known, ")");
  }
  return *it->second;
}

PartialOutputMetaDataVector UserCustomOpDescriptor::output_meta(const at::Stack& inputs) const {
  PartialOutputMetaDataVector metas;
  try {
    metas = output_meta_fn_(inputs);
  } catch (const std::exception& e) {
    rethrow_for(schema_, "OutputMetaFn", e);
  }
  for (size_t i = 0; i < metas.size(); ++i) {
    TORCH_CHECK(metas[i].dtype != c10::ScalarType::Undefined, schema_, ": its OutputMetaFn gave output ", i,
                " no dtype");
    for (int64_t size : metas[i].shape) {
      TORCH_CHECK(size >= 0, schema_, ": its OutputMetaFn gave output ", i, " a negative size ",
                  c10::IntArrayRef(metas[i].shape));
    }
  }
  return metas;
}

std::vector<at::Tensor> UserCustomOpDescriptor::execute(const std::vector<c10::IValue>& inputs) const {
  std::vector<at::Tensor> tensors;
  for (const auto& v : inputs) {
    if (v.isTensor() && v.toTensor().defined()) {
      tensors.push_back(v.toTensor());
    }
  }
  const c10::DeviceGuard guard(common_simhpu_device(schema_.c_str(), {&tensors}));
  std::vector<at::Tensor> outputs;
  for (const auto& meta : output_meta(inputs)) {
    outputs.push_back(at::empty(meta.shape, tensors.front().options().dtype(meta.dtype)));
  }
  std::string params;
  if (fill_params_fn_) {
    size_t size = 0;
    std::shared_ptr<void> blob;
    try {
      blob = fill_params_fn_(inputs, size);
    } catch (const std::exception& e) {
      rethrow_for(schema_, "FillParamsFn", e);
    }
    TORCH_CHECK(blob != nullptr || size == 0, schema_, ": its FillParamsFn returned no data but a size of ", size);
    params.assign(static_cast<const char*>(blob.get()), size);
  }
  launch_user_kernel(schema_.c_str(), kernel_, tensors, outputs, std::move(params));
  return outputs;
}

void launch_user_kernel(const char* op, const std::string& kernel, const std::vector<at::Tensor>& inputs,
                        const std::vector<at::Tensor>& outputs, std::string params) {
  const KernelDef& def = find_kernel(kernel.c_str(), op);
  const c10::DeviceGuard guard(common_simhpu_device(op, {&inputs, &outputs}));
  launch(def, op, at::TensorList(inputs), written(at::TensorList(outputs)), c10::string_view(params));
}

} // namespace simhpu::custom_op
