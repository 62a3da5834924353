#pragma once
// Chaos scheduling (SIMHPU_CHAOS=SEED): stream workers are held back at seeded
// random points, so independent streams drift apart and a missing
// synchronisation becomes a wrong result in an ordinary test, not only on the
// day the timing goes wrong. The delays are drawn per stream from the seed, so a
// seed that makes a test fail gives the same delays at the same launches again.
//
// The policy: the first launch a worker finds after it was idle is held back
// with probability 1/2, for a time uniform in [0, 10 ms); any other launch with
// probability 1/16, for [0, 1 ms).
//
// The runtime does not call it: the scheduler subscribes to the runtime's
// observers (runtime/observers.h) and is active while a seed is set.
#include <c10/core/Stream.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace simhpu::chaos {

namespace detail {
extern std::atomic<bool> on;
} // namespace detail

inline bool enabled() {
  return detail::on.load(std::memory_order_relaxed);
}

// The seed in use (none: off). Read from SIMHPU_CHAOS when the library loads.
std::optional<uint64_t> seed();
// Changes it (none: off); workers reseed at their next launch.
void set_seed(std::optional<uint64_t> seed);

// One launch a worker drew for: its stream, which of the stream's launches since
// the seed was set it was (from 0), whether the worker found it after waiting for
// work, whether it was held back, and for how long (or would have been).
struct Draw {
  int device;
  int64_t stream;
  uint64_t launch;
  bool after_idle;
  bool held;
  uint64_t microseconds;
};
// The draws since the seed was last set, in the order they were made (the first 100,000).
std::vector<Draw> draws();

// On `stream`'s worker, before it runs a record; `after_idle`: the first since it waited for work.
void before_kernel_slow(const c10::Stream& stream, bool after_idle);

// " (chaos scheduling: SIMHPU_CHAOS=N ...)" while on, for error messages; empty while off.
std::string note();

} // namespace simhpu::chaos
