#pragma once
// Device memory a failed kernel may have left undefined. A kernel that fails
// (or is not run because it would read such memory) marks the storages it
// writes; from then on every kernel that takes one of them is not run either,
// and every host read of one raises, naming the original failure, in whichever
// thread observes it. A marked block is forgotten when the allocator frees it.
// This is CUDA's "sticky error", narrowed to the memory the failure touched:
// everything else on the device stays usable.
#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <memory>
#include <string>

namespace simhpu {

using FailureMessage = std::shared_ptr<const std::string>;

// Marks the storage's memory (if on the device and not empty) as left undefined by `failure`.
void mark_undefined(const c10::Storage& storage, const FailureMessage& failure);

// True while any memory is marked (one atomic load: the launch path's check).
bool any_undefined();

// The failure that left the storage's memory undefined, or null.
FailureMessage undefined_by(const c10::Storage& storage);

// Called by the allocator when it frees a device block.
void forget_undefined(const void* block);

// Raises (naming `op`) if `t` is on the device and its memory is undefined.
void check_defined(const at::Tensor& t, const char* op);

} // namespace simhpu
