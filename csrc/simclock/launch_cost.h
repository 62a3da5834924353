#pragma once
// What one launch costs on the modelled part: the time its work (runtime/launch_work.h)
// takes there (a roofline; alpha-beta for links).
#include "runtime/launch_record.h"
#include "runtime/launch_work.h"
#include "simclock/device_profile.h"

#include <c10/core/ScalarType.h>

namespace simhpu::simclock {

// What bounds a launch's time on the part.
enum class Bound : uint8_t { Compute, Memory, Latency, HostLink, Fabric, None };

// Fills what `cost` leaves open from the record: bytes of its tensors (their
// elements as the launch sees them, 0-dim ones left out as kernel arguments;
// storages when it names no tensors), vector
// FLOPs one per element of its largest tensor, the dtype of its first floating tensor;
// for a multi-tensor kernel, the kernels the part's library would launch for its lists.
void complete_from_record(LaunchWork& cost, KernelTraits& traits, const LaunchRecord& record,
                          const DeviceProfile& profile);

// What a row-wise kernel's operator (a norm, a softmax, forward or backward) copies
// first on a part: PyTorch's CUDA kernels take their rows contiguous, so each
// strided tensor it reads (broadcasts aside) is made contiguous by a copy of its
// own, an operator and a kernel the host launches (see KernelTraits).
struct ContiguousCopies {
  int64_t elements = 0;
  int count = 0;
};
ContiguousCopies copies_made_contiguous(MemoryClass c, const LaunchRecord& record);

// The kernels CUDA's multi-tensor apply launches for `depth` lists of tensors of
// these sizes (elements): a launch is full at the profile's most tensors for that
// depth or its most chunks.
int64_t multi_tensor_kernels(const std::vector<int64_t>& numels, int depth, const MultiTensorApply& mta);

// Whether the part's softmax holds rows of `length` elements of `element_size`
// bytes in its threads' registers (device_profile.h, SoftmaxRows).
bool softmax_rows_in_registers(int64_t length, int64_t element_size, const SoftmaxRows& rule);

struct Timing {
  double seconds = 0;
  Bound bound = Bound::None;
  double peak_fraction = 0;  // of the bounding resource's peak, over the whole duration
};

// The time `cost` takes on `profile`'s device, as its libraries would run it (`traits`).
Timing time_of(const LaunchWork& cost, const DeviceProfile& profile, const KernelTraits& traits = {});

// How many of the profile's nodes a group of `ranks` world ranks spans, from
// `first_rank` every `rank_stride` (0: not evenly spaced, taken as packed).
int nodes_spanned(int ranks, int first_rank, int rank_stride, const DeviceProfile& profile);

// A collective of `bytes` per rank over `ranks` devices of the profile's fabric:
// the faster of ring and tree (as NCCL's tuner picks), through the node's links
// while the group is within one node, the network's (one link per device) when it spans `nodes` > 1.
double collective_seconds(CollectiveKind kind, double bytes, int ranks, int nodes, const DeviceProfile& profile);
// The same, with the part that does not grow with the bytes (of the algorithm chosen at this size).
struct CollectiveCost {
  double seconds, latency;
};
CollectiveCost collective_cost(CollectiveKind kind, double bytes, int ranks, int nodes, const DeviceProfile& profile);

const char* bound_name(Bound bound);

} // namespace simhpu::simclock
