// The PyTorch headers most translation units include, precompiled once per
// build (see setup.py): parsing the autograd and ATen headers is most of each
// generated operator's compile time. Only torch's own headers belong here:
// they change with torch, not with this project, so the precompiled header is
// rebuilt rarely. Every source file still includes what it uses itself.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>
