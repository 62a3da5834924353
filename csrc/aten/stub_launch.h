#pragma once
// The STUB route (an `official:` entry with `stub:` in op_plugin_functions.yaml):
// ATen's own kernel for the operator builds the TensorIterator on the host —
// broadcasting, type promotion, output allocation and resizing — and calls the
// dispatch stub; the stub's simhpu function launches the iterator's operands
// as one record on the current stream (elementwise kernels see the tensors as
// they are, reductions over the iterator's shape: see stub_launch.cpp).
// The kernel runs on the stream's worker, asynchronously, like any other.
#include "runtime/launch_record.h"

#include <ATen/TensorIterator.h>

#include <initializer_list>

namespace simhpu::stubs {

// How the kernel sees the operands' element type.
enum class ComputeDtype : uint8_t {
  Common,  // the iterator's common dtype (elementwise kernels); inputs of another dtype are cast to it
  Output,  // the first output's (a reduction accumulates in its output's dtype)
};

// Launches `kernel` for `op` (called by ATen through `stub`): its arguments are
// the compute dtype, then the iterator's operands (outputs first, as ATen
// orders them; `operands` is how many the entry expects), then `scalars`.
void launch_iterator(const char* op, const char* stub, at::TensorIteratorBase& iter, const KernelDef& kernel,
                     int operands, ComputeDtype compute, std::initializer_list<c10::Scalar> scalars);

// On the worker: the launch's operands, each in the compute dtype (a
// temporary where the tensor's own dtype differs: a cast copy of an input, an
// output written back by finish()).
class IteratorOperands {
 public:
  IteratorOperands(const KernelArgs& args, int outputs, int inputs);
  c10::ScalarType dtype() const { return dtype_; }
  const DeviceTensor& output(int i) const { return operands_[i]; }
  const DeviceTensor& input(int i) const { return operands_[outputs_ + i]; }
  const c10::Scalar& scalar(int i) const;
  // Outputs computed in a temporary, into their tensors.
  void finish();

 private:
  const KernelArgs& args_;
  int outputs_;
  int count_;
  c10::ScalarType dtype_;
  c10::SmallVector<DeviceTensor, 4> operands_;
  c10::SmallVector<at::Tensor, 4> temporaries_;
  c10::SmallVector<std::pair<int, at::Tensor>, 2> written_back_;  // output index -> its temporary
};

} // namespace simhpu::stubs

// Registers a kernel a stub entry names with `exec: NAME` (csrc/kernels):
//   void NAME(simhpu::stubs::IteratorOperands& operands) {...}  SIMHPU_STUB_KERNEL(NAME);
#define SIMHPU_STUB_KERNEL(name)                                                             \
  static_assert(std::is_same_v<decltype(&name), void (*)(::simhpu::stubs::IteratorOperands&)>, \
                #name ": a stub kernel is void " #name "(simhpu::stubs::IteratorOperands& operands)")
