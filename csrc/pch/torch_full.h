
// The rest of the torch headers the project's heavier translation units use:
// autograd nodes, the CPU fallback, TensorIterator and ATen's operators.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/DispatchStub.h>
