#pragma once
// What a launcher may tell simulated time about its next launch (see
// sim_clock.h): light enough for every generated adapter to include.
#include "simclock/launch_cost.h"

#include <atomic>

namespace simhpu::simclock {

namespace detail {
extern std::atomic<bool> on;
} // namespace detail

// Whether simulated time is on (a device profile is set).
inline bool enabled() {
  return detail::on.load(std::memory_order_relaxed);
}

// What the next launch on this thread does, when the launcher knows better
// than the record (fields left open are still worked out from the record).
void hint(const LaunchCost& cost);

} // namespace simhpu::simclock
