#pragma once
// The runtime's events, published for whoever watches them: the lenses (chaos
// scheduling first; the sanitizer, simulated time, memory history and the trace
// follow). The runtime names no lens: it publishes here, and a lens is one
// folder that subscribes a RuntimeObserver when the library loads.
//
// A lens that is switched off says so (set_active), and an event no active
// observer watches costs the runtime one relaxed atomic load: nothing
// measurable on the launch path.
#include <c10/core/Stream.h>

#include <atomic>
#include <string>

namespace simhpu {

class RuntimeObserver {
 public:
  virtual ~RuntimeObserver() = default;
  // On `stream`'s worker, before it runs a record; `after_idle`: the first since it waited for work.
  virtual void before_kernel(const c10::Stream& stream, bool after_idle) {}
  // Whether a host thread may run a stream's records itself while it waits for
  // them (an observer that owns the workers' timing says no).
  virtual bool allows_host_runs() const { return true; }
  // Words for the end of a device error or a report ("(chaos scheduling was on: ...)"), or "".
  virtual std::string context_note() const { return {}; }
};

namespace observers {

namespace detail {
extern std::atomic<int> active;
void before_kernel(const c10::Stream& stream, bool after_idle);
} // namespace detail

// `observer` watches from now on, for the library's lifetime; it starts inactive.
void subscribe(RuntimeObserver* observer);
// Switches a subscribed observer's events on or off.
void set_active(RuntimeObserver* observer, bool active);

inline void before_kernel(const c10::Stream& stream, bool after_idle) {
  if (detail::active.load(std::memory_order_relaxed) != 0) detail::before_kernel(stream, after_idle);
}
bool allow_host_runs();
// Every active observer's context_note, in subscription order.
std::string context_notes();

} // namespace observers
} // namespace simhpu
