#pragma once
// Pinned ("page-locked") host memory: host buffers that device copies may use
// directly, so a non_blocking copy from or to one is queued and overlaps with
// other work instead of being staged or synchronised (as with CUDA).
#include <c10/core/Allocator.h>

namespace simhpu {

c10::Allocator* pinned_allocator();

// Whether `ptr` lies inside a pinned block.
bool is_pinned(const void* ptr);

// The pinned block `ptr` lies in (whole pages), or false.
bool pinned_block_of(const void* ptr, const char** start, size_t* size);

} // namespace simhpu
