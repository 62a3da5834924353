#pragma once
// Operators declared in op-plugin's own YAML dialect (codegen/op_plugin/dialect.py), as the
// generated units under build/generated/csrc/op_plugin_dialect/ hand them over:
//  - an official entry whose gen_opapi block has readable rules is a simulated ACLNN kernel:
//    ATen's CPU kernel runs as the device kernel (the reference path), and the outputs'
//    sizes and dtypes its rules declare are checked against what ATen made, a mismatch
//    reported at the entry's file:line;
//  - a custom entry is a callable name whose kernel is torch_npu's: calling it raises
//    NotImplementedError naming the kernel and how to provide one.
#include "op_plugin_dialect/rule_value.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace simhpu::op_plugin {

using Rule = RuleValue (*)(const RuleArgs&);

struct OutputRules {
  Rule size;   // nullptr: the entry gives no size rule for this output (not checked)
  Rule dtype;  // nullptr: no dtype rule (an out= tensor's dtype is the caller's)
};

struct SimulatedKernel {
  const char* op;       // aten operator, "add.Tensor"
  const char* kernel;   // the ACLNN kernel its entry names, "aclnnAdd"
  const char* where;    // "op_plugin_functions.yaml:123"
  std::vector<OutputRules> outputs;  // in return order
};

struct UnprovidedKernel {
  const char* op;       // "npu::npu_rotary_mul"
  const char* kernel;   // "aclnnRotaryPositionEmbedding", or "" (a hand-written torch_npu adapter)
  const char* where;
};

// Called by the generated units' static initialisers.
bool add_simulated_kernel(SimulatedKernel entry);
bool add_unprovided_kernel(UnprovidedKernel entry);

// The PrivateUse1 kernel of every custom entry: raises NotImplementedError naming its kernel.
void unprovided_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Registers the simulated ACLNN kernels (once, when the module loads, before the CPU
// kernels are preferred over composites). An operator simhpu already has a device kernel
// for keeps it; one ATen decomposes before any backend (CompositeImplicitAutograd) is left
// to its decomposition. Units loaded later (an extension built from a dialect file) register
// their kernels as they load.
void register_simulated_kernels();

// What register_simulated_kernels did, by operator: "simulated", "own kernel", "decomposes".
std::vector<std::pair<std::string, std::string>> simulated_kernel_report();
std::vector<std::string> unprovided_operators();

}  // namespace simhpu::op_plugin
