#pragma once
// Guarding the program's view of pinned host blocks while launches still use
// them (stream workers reach them through the kernels' view, see
// runtime/pinned_memory.h, and never fault here): a host access the guard does
// not allow faults, the handler lifts the block's guard, notes the access (and
// whether it wrote) and lets it go ahead. The sanitizer (stream_sanitizer.cpp)
// decides what to guard and judges what was hit by launch order.
//
// Faults elsewhere go to the handler that was installed before.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace simhpu::sanitizer::pinned {

// What the host may do to a guarded block without faulting.
enum class Access { None, Read, ReadWrite };

// Sets what the host may do to [begin, begin + size) (whole pages); ReadWrite
// lifts the guard. False if no slot is left to guard it (it stays unguarded).
bool protect(uintptr_t begin, size_t size, Access allowed);

// A guarded block the host touched, and whether the access wrote.
struct Hit {
  uintptr_t begin;
  bool write;
};
// The blocks hit since the last call; their guards are lifted.
std::vector<Hit> take_hits();
// Whether a hit is waiting for take_hits (safe from anywhere, cheap).
bool any_hit();

} // namespace simhpu::sanitizer::pinned
