#pragma once
// Sparse tensors on simhpu (aten/sparse.cpp): what the dense reference path
// needs when a CPU kernel returns a sparse tensor (x.to_sparse()).
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Device.h>

namespace simhpu {

// Whether `t` is sparse (COO or a compressed layout).
bool is_sparse_layout(const at::Tensor& t);

// A sparse CPU tensor as the same sparse tensor on `device`.
at::Tensor sparse_to_device(const at::Tensor& host, c10::Device device);

// The SparsePrivateUse1/SparseCsrPrivateUse1 fallback: the CPU's sparse kernel
// runs over CPU copies of the operands, synchronised; results come back.
void sparse_reference_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

} // namespace simhpu
