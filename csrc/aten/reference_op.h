#pragma once
// What the reference path needs to know about an aten operator, worked out
// once per operator from its schema, tags and registered kernels.
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace simhpu {

struct ReferenceOp {
  enum class Kind : uint8_t {
    View,           // returns a view of an input: device view, no kernel
    Async,          // meta kernel gives the outputs; the CPU kernel runs on the worker
    Synchronized,   // output shape depends on data, or no meta kernel: the host waits
    NoCpuKernel,    // nothing to run it with
  };
  enum class Arg : uint8_t { Tensor, TensorList, OptionalTensorList, Generator, ScalarType, Other };

  explicit ReferenceOp(c10::OperatorHandle handle) : op(std::move(handle)) {}

  c10::OperatorHandle op;
  std::string name;  // "aten::add.Tensor": launch records and errors point here
  Kind kind = Kind::Async;
  std::vector<Arg> args;
  std::vector<bool> arg_written;  // the schema marks the argument (a!)
  std::vector<bool> arg_is_out;   // written and keyword-only: an out= tensor
  // Arguments the CPU kernel writes though the schema does not say so
  // (BatchNorm's running statistics while training), each with the bool
  // argument that says it does (-1: always); see writes_unannounced.
  std::vector<std::pair<int, int>> unannounced_writes;
  // Per return: the argument it aliases (in-place, out= and view ops), or -1 for a new tensor.
  std::vector<int> return_alias;
  // Uses randomness without taking a Generator: the CPU kernel would draw from
  // the CPU's default generator, so it runs synchronised, seeded from the device's.
  bool hidden_randomness = false;
  // For such an op that is synchronised for that reason alone: its float
  // argument `dropout_p`, at 0 of which it draws nothing, so the call runs
  // asynchronously (the CPU's fused attention). -1: none.
  int randomness_gate = -1;
  // Tagged pointwise: its outputs' shapes and dtypes follow from its tensors'
  // and the kinds (not the values) of its numbers (see meta_cache.h).
  bool pointwise = false;
  // Tagged data-dependent: its results' shapes (or its result, a value) follow from its inputs' values.
  bool shapes_depend_on_values = false;
  // Calls whose outputs the meta kernel describes otherwise than the CPU kernel
  // makes them (see reference_op.cpp): they run synchronised. Null: none.
  bool (*meta_differs)(c10::ArrayRef<c10::IValue> args) = nullptr;
  // Whether the meta kernel sizes empty out= tensors as the CPU kernel does:
  // -1 not known yet, 0 no, 1 yes (learnt from the first such call, see fallback.cpp).
  mutable std::atomic<int8_t> empty_out_meta_trusted{-1};

  size_t num_args() const { return args.size(); }
  // The route of this call: Synchronized ops whose randomness this call does not use run as Async.
  Kind kind_of_call(c10::ArrayRef<c10::IValue> call_args) const {
    if (randomness_gate >= 0 && call_args[randomness_gate].isDouble() && call_args[randomness_gate].toDouble() == 0.0) {
      return Kind::Async;
    }
    return kind;
  }
  // Whether this call writes argument `i` without its schema saying so.
  bool writes_unannounced(size_t i, c10::ArrayRef<c10::IValue> call_args) const {
    for (const auto& [arg, when] : unannounced_writes) {
      if (static_cast<size_t>(arg) == i) return when < 0 || (call_args[when].isBool() && call_args[when].toBool());
    }
    return false;
  }
};

// Whether some calls of the operator ("aten::native_batch_norm", any overload)
// are known to be shaped otherwise by its meta kernel than by its CPU kernel.
bool meta_known_to_differ(const std::string& op_name);

// The description of `op` (built on first use, then cached for good).
const ReferenceOp& reference_op(const c10::OperatorHandle& op);

} // namespace simhpu
