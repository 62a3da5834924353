#pragma once
// Pinned ("page-locked") host memory: host buffers that device copies may use
// directly, so a non_blocking copy from or to one is queued and overlaps with
// other work instead of being staged or synchronised (as with CUDA).
//
// Each block is mapped twice: the program's view (the tensor's data pointer)
// and the kernels' view, through which launches reach it (describe_tensor), as
// a part's DMA engine reaches host memory without going through the host's
// page tables. A lens may then change what the program's view allows (the
// sanitizer makes a block being copied fault on host access) without touching
// what the stream workers do.
#include <c10/core/Allocator.h>

#include <cstddef>

namespace simhpu {

c10::Allocator* pinned_allocator();

// Whether `ptr` (in the program's view) lies inside a pinned block.
bool is_pinned(const void* ptr);

// The pinned block `ptr` (in the program's view) lies in (whole pages), or false.
bool pinned_block_of(const void* ptr, const char** start, size_t* size);

// Whether `data` is a pinned block's data pointer (cheap: compares the deleter).
bool is_pinned_data(const c10::DataPtr& data);

// A pinned block's two views and its size (whole pages), from its data pointer.
struct PinnedViews {
  char* program;
  char* kernel;
  size_t size;
};
PinnedViews pinned_views(const c10::DataPtr& data);

// The kernels' view of `ptr`, which lies in the pinned block `data` holds.
inline void* pinned_kernel_address(const c10::DataPtr& data, const void* ptr) {
  const PinnedViews views = pinned_views(data);
  return views.kernel + (static_cast<const char*>(ptr) - views.program);
}

} // namespace simhpu
