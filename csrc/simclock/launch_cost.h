#pragma once
// What one launch costs on the modelled part: the work it does (FLOPs, bytes,
// kind) and the time that takes there (a roofline; alpha-beta for links).
#include "runtime/launch_record.h"
#include "simclock/device_profile.h"

#include <c10/core/ScalarType.h>

namespace simhpu::simclock {

enum class Work : uint8_t {
  Vector,      // elementwise, reductions, anything not said otherwise
  Matrix,      // GEMM, convolution, attention: matrix units
  HostToDevice,
  DeviceToHost,
  Collective,
  Marker,      // event record / wait: no work
  KernelArgument,  // a 0-dim host value copied to the device: on the part, an argument of the next kernel
};

// What bounds a launch's time on the part.
enum class Bound : uint8_t { Compute, Memory, Latency, HostLink, Fabric, None };

// The collectives the fabric model knows (c10d::OpType's, as the process group names them).
enum class CollectiveKind : uint8_t { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, PointToPoint,
                                      Barrier };

struct LaunchCost {
  Work work = Work::Vector;
  double flops = -1;  // negative: worked out from the record's tensors
  double bytes = -1;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool pageable = false;  // a host-link copy from pageable memory
  CollectiveKind collective = CollectiveKind::AllReduce;
  int ranks = 1;
  double seconds = -1;  // a kernel whose duration is known (a diagnostic that occupies the device): that long
};

// Fills what `cost` leaves open from the record: bytes of its tensors (their
// elements as the launch sees them, 0-dim ones left out as kernel arguments;
// storages when it names no tensors), vector
// FLOPs one per element of its largest tensor, the dtype of its first floating tensor.
void complete_from_record(LaunchCost& cost, const LaunchRecord& record);

struct Timing {
  double seconds = 0;
  Bound bound = Bound::None;
  double peak_fraction = 0;  // of the bounding resource's peak, over the whole duration
};

// The time `cost` takes on `profile`'s device.
Timing time_of(const LaunchCost& cost, const DeviceProfile& profile);

// A collective of `bytes` per rank over `ranks` devices of the profile's fabric:
// the faster of ring and tree (as NCCL's tuner picks), through the node's links
// while the ranks fit in a node, the network's beyond.
double collective_seconds(CollectiveKind kind, double bytes, int ranks, const DeviceProfile& profile);

const char* work_name(Work work);
const char* bound_name(Bound bound);
const char* collective_name(CollectiveKind kind);

} // namespace simhpu::simclock
