#pragma once
// Write-protecting pinned host blocks while a launch still reads them, and
// noticing the host writing one anyway: the write faults, the handler makes the
// block writable again and marks it, and the write goes ahead. The sanitizer
// (stream_sanitizer.cpp) decides what to guard and reports what was hit.
//
// Faults elsewhere go to the handler that was installed before.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace simhpu::sanitizer::pinned {

// Makes [begin, begin + size) read-only (whole pages); false if no slot is left.
bool guard(uintptr_t begin, size_t size);
// Writable again (no-op for a block not guarded).
void unguard(uintptr_t begin);
// Blocks the host wrote while guarded since the last call; they are no longer guarded.
std::vector<uintptr_t> take_hits();
// Whether a hit is waiting for take_hits (safe from anywhere, cheap).
bool any_hit();

} // namespace simhpu::sanitizer::pinned
