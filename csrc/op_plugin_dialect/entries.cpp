#include "op_plugin_dialect/entries.h"

#include "aten/fallback.h"

#include <torch/library.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

namespace simhpu::op_plugin {

namespace {

// Filled by static initialisers, read after them: no lock needed.
std::map<std::string, SimulatedKernel>& simulated() {
  static std::map<std::string, SimulatedKernel> entries;
  return entries;
}

std::map<std::string, UnprovidedKernel>& unprovided() {
  static std::map<std::string, UnprovidedKernel> entries;
  return entries;
}

std::vector<std::pair<std::string, std::string>>& report() {
  static std::vector<std::pair<std::string, std::string>> rows;
  return rows;
}

std::string qualified(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool is_scalar_type(const c10::Argument& argument) {
  c10::TypePtr type = argument.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  return type->kind() == c10::TypeKind::ScalarTypeType;
}

RuleArgs rule_args(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> values) {
  RuleArgs args;
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < values.size(); ++i) {
    args.add(arguments[i].name(), RuleValue::from_ivalue(values[i], is_scalar_type(arguments[i])));
  }
  return args;
}

std::string describe(const std::vector<int64_t>& sizes, c10::ScalarType dtype) {
  std::ostringstream out;
  out << "size [";
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << "] and dtype " << c10::toString(dtype);
  return out.str();
}

void simulated_aclnn_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const SimulatedKernel& entry = simulated().at(qualified(op.operator_name()).substr(std::strlen("aten::")));
  // The rules see the arguments as the call passed them (an out= tensor before it is resized).
  std::vector<std::pair<std::optional<std::vector<int64_t>>, std::optional<c10::ScalarType>>> declared;
  bool readable = true;
  try {
    const RuleArgs args = rule_args(schema, torch::jit::last(*stack, schema.arguments().size()));
    for (const OutputRules& rules : entry.outputs) {
      declared.emplace_back(rules.size ? std::optional(result_sizes(rules.size(args))) : std::nullopt,
                            rules.dtype ? std::optional(result_dtype(rules.dtype(args))) : std::nullopt);
    }
  } catch (const RuleUnreadable&) {
    readable = false;  // this call's arguments are beyond what the rules say: ATen's outputs, unchecked
  }
  reference_fallback(op, stack);
  if (!readable) return;
  const auto results = torch::jit::last(*stack, schema.returns().size());
  for (size_t i = 0; i < declared.size() && i < results.size(); ++i) {
    if (!results[i].isTensor()) continue;
    const at::Tensor& made = results[i].toTensor();
    // What the entry leaves unsaid (an out= tensor's dtype) is taken as ATen made it.
    const std::vector<int64_t> sizes = declared[i].first.value_or(made.sizes().vec());
    const c10::ScalarType dtype = declared[i].second.value_or(made.scalar_type());
    TORCH_CHECK(made.sizes().vec() == sizes && made.scalar_type() == dtype, "aten::", entry.op, " (", entry.where,
                "): gen_opapi's rule for output ", i, " of ", entry.kernel, " gives ", describe(sizes, dtype),
                ", where ATen computes ", describe(made.sizes().vec(), made.scalar_type()),
                ": fix the entry's size:/dtype: rule");
  }
}

// Set once register_simulated_kernels has run: kernels of units loaded later (an extension built
// from a dialect file) are registered as they are added.
torch::Library*& live_library() {
  static torch::Library* library = nullptr;
  return library;
}

void register_one(const std::string& name) {
  const auto dot = name.find('.');
  const c10::OperatorName op_name("aten::" + name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1));
  auto op = c10::Dispatcher::singleton().findOp(op_name);
  if (!op) {
    report().emplace_back(name, "not in this torch");
  } else if (op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
    report().emplace_back(name, "own kernel");
  } else if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
    report().emplace_back(name, "decomposes");
  } else {
    live_library()->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&simulated_aclnn_kernel>());
    report().emplace_back(name, "simulated");
  }
}

}  // namespace

bool add_simulated_kernel(SimulatedKernel entry) {
  std::string name = entry.op;
  const bool added = simulated().emplace(name, std::move(entry)).second;
  if (added && live_library() != nullptr) register_one(name);
  return added;
}

bool add_unprovided_kernel(UnprovidedKernel entry) {
  unprovided().emplace(entry.op, entry);
  return true;
}

void unprovided_kernel(const c10::OperatorHandle& op, torch::jit::Stack*) {
  auto found = unprovided().find(qualified(op.operator_name()));
  const std::string where = found == unprovided().end() ? "" : std::string(" (") + found->second.where + ")";
  const std::string kernel = found == unprovided().end() || !*found->second.kernel
                                 ? std::string("its kernel (a hand-written torch_npu adapter)")
                                 : std::string("its ACLNN kernel ") + found->second.kernel;
  TORCH_CHECK_NOT_IMPLEMENTED(false, qualified(op.operator_name()), where, ": ", kernel,
                              " is torch_npu's, and simhpu has none. Provide one: give the operator an entry in "
                              "op_plugin_overlay.yaml beside the dialect file (simhpu's own format: exec:, composite: "
                              "or adapter:; docs/yaml.md, 'Building a wheel from op-plugin's own YAML'), or register a device kernel at run time "
                              "with torch_simhpu.library.register_user_custom_op");
}

void register_simulated_kernels() {
  if (live_library() != nullptr) return;
  // Never destroyed: the registrations last as long as the process.
  live_library() = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const auto& [name, entry] : simulated()) register_one(name);
}

std::vector<std::pair<std::string, std::string>> simulated_kernel_report() { return report(); }

std::vector<std::string> unprovided_operators() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : unprovided()) names.push_back(name);
  return names;
}

}  // namespace simhpu::op_plugin
