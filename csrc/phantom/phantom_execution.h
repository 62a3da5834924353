#pragma once
// Phantom execution (torch.simhpu.simulate(execute=False), SIMHPU_EXECUTE=0):
// the program runs, and the device does not. Launches are made, priced and
// placed on the simulated clocks as ever, but no kernel runs; device memory is
// handed out by the allocator as ever (addresses, capacity, out-of-memory,
// snapshots), and no page of it is touched, so a part larger than this
// machine "allocates". What the host reads of device values (a copy to the
// CPU, item()) gets placeholder values, counted with the Python line that read
// them; an operator that needs values on the host to compute (a result whose
// shape depends on them, as nonzero's) is refused, naming it.
//
// Values the host knows stay known: memory the allocator hands out while it is
// on is known (what it holds is undefined on any part), and a small kernel
// (all the memory it holds within the known-values limit) whose every input is
// known runs as ever, so what it writes is known too: a tensor made from host
// data (torch.tensor, arange, a shape the program computed) and what is computed
// from such tensors alone. A host read of known memory gets its values, and an
// operator the host computes over known values runs. Anything a kernel that did
// not run wrote is unknown again.
//
// A lens of its own: it observes the runtime (runtime/observers.h) and stands
// in for the device's values there; the runtime does not name it.
#include <cstdint>
#include <string>
#include <vector>

namespace at {
class Tensor;
} // namespace at

namespace simhpu::phantom {

// The most device memory a kernel may hold and still run because its values are known.
constexpr int64_t kDefaultKnownBytes = int64_t(1) << 20;

// What host reads of device values get while phantom execution is on.
enum class Values : int {
  Placeholder = 0,  // ones for floating point (no division by zero), zeros for integers, False for bool
  Error = 1,        // the first read raises
};

// On (the device's queues should be empty: what they hold still runs) or off;
// known_bytes: the most memory a kernel may hold and still run for its known
// values (0: none runs).
void set_enabled(bool on, Values values, int64_t known_bytes = kDefaultKnownBytes);
bool enabled();

// One Python line that read device values while phantom execution was on.
struct HostRead {
  std::string op;  // aten::_local_scalar_dense (item), aten::_copy_from (to the CPU)
  std::string file;
  int line = 0;
  int64_t count = 0;
  int64_t bytes = 0;
};
// The reads since the last clear, in the order their lines first read.
std::vector<HostRead> host_reads();
void clear_host_reads();
// Makes `t`'s memory unknown (a stand-in for values phantom execution does not have).
void forget_values(const at::Tensor& t);
// Kernels run since the last clear because their values were known.
int64_t known_launches();
// Of those, collectives among simulated peers, answered as if every peer sent what
// this rank sends (distributed/process_group.h).
int64_t peer_answers();

// How a router's tokens spread over its experts, where the program counts them
// (torch.histc) over values nobody knows: the histogram is this distribution's
// of the tokens counted, and known from then on (split sizes, offsets, an
// all_to_all's sizes follow from it).
struct Routing {
  enum class Kind : int { Balanced = 0, Zipf = 1, Histogram = 2 };
  Kind kind = Kind::Balanced;
  double exponent = 0;          // Zipf: expert i gets a share proportional to 1 / (i + 1)^exponent
  std::vector<double> weights;  // Histogram: each expert's share (as a real run counted them)
  std::string setting = "balanced";  // as the user gave it, for messages
};
void set_routing(Routing routing);
// Router histograms given the routing distribution since the last clear.
int64_t routed_histograms();

} // namespace simhpu::phantom
