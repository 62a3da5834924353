// The torch headers most translation units include, precompiled once per build
// (build_tools/precompiled_headers.py): tensors, IValues, the dispatcher and
// operator registration, the dtype dispatch macros. A small header loads
// faster than a large one, so only what most units use belongs here; units
// that need more get torch_full.h, which follows this file. Only torch's own
// headers belong here, and every source still includes what it uses itself.
#include <ATen/AccumulateType.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <torch/headeronly/version.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>
