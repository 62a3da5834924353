#pragma once
// The launching thread's idle OpenMP team, given back while it feeds the device.

#include <cstddef>

namespace simhpu {

// Device kernels run on stream workers, each with an OpenMP team of its own. A
// host thread that has run CPU work keeps an idle team besides, and with more
// OpenMP threads than CPUs libgomp throttles the spin-waiting of every team, so
// each parallel region of a kernel wakes its helpers through the kernel's
// scheduler (a compiled GPT-2 step: 18.3 ms with the idle team, 13.0 without).
//
// Called for each launch with the number of kernels it hands over: once every
// kKernelsPerRelease of them, the thread's team is released (the host's next
// CPU work builds it again). Not on every launch: a loop alternating CPU work
// and launches would rebuild the team each time (~100 us). Nothing happens
// inside a parallel region or when the thread has no team.
constexpr size_t kKernelsPerRelease = 256;
void release_idle_host_openmp_team_now_and_then(size_t kernels_launched);

} // namespace simhpu
