#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

namespace simhpu {

// Grow or shrink a device storage to `new_bytes`, keeping its contents.
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);

// Make sure `self`'s storage holds its current sizes/strides/offset.
void ensure_storage_fits(const at::Tensor& self);

} // namespace simhpu
