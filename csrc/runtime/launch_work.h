#pragma once
// What a launch does, when its launcher knows better than the record: a matrix
// launch's FLOPs, a copy over the host link, a collective and its group. The
// runtime carries it from the launcher to the launch's observers (observers.h),
// who price it (simulated time) or stand in for it (phantom execution); fields
// left open are worked out from the record by whoever reads it. Light enough
// for every generated adapter to include.
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace simhpu {

// The elements a kernel reads or writes of a tensor of these sizes and strides: each
// distinct one once (a dimension of stride 0 - a broadcast input, a reduction's output
// seen over its input's shape - is the same memory again).
inline double distinct_elements(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  double elements = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (strides[d] != 0 || sizes[d] == 0) elements *= static_cast<double>(sizes[d]);
  }
  return elements;
}

enum class Work : uint8_t {
  Vector,      // elementwise, reductions, anything not said otherwise
  Matrix,      // GEMM, convolution, attention: matrix units
  HostToDevice,
  DeviceToHost,
  Collective,
  Marker,      // event record / wait: no work
  KernelArgument,  // a 0-dim host value copied to the device: on the part, an argument of the next kernel
};

// The collectives a fabric model knows (c10d::OpType's, as the process group names them).
enum class CollectiveKind : uint8_t { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, PointToPoint,
                                      Barrier };

struct LaunchWork {
  Work work = Work::Vector;
  double flops = -1;  // negative: worked out from the record's tensors
  double bytes = -1;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool pageable = false;  // a host-link copy from pageable memory
  CollectiveKind collective = CollectiveKind::AllReduce;
  int ranks = 1;
  // Where a collective's group sits in the world: its first member's world rank
  // and the distance between members (0: not evenly spaced). A tensor-parallel
  // group of 8 at stride 1 fits in a node; a data-parallel group at stride 8 spans nodes.
  int first_rank = 0;
  int rank_stride = 1;
  // Which call of which group this is, alike in every process of the world: the
  // group (a hash of its world ranks and of how many groups with these ranks came
  // before) and the call's place among its group's calls; for point to point,
  // the peer's world rank and the place among the calls between the two in that
  // direction. Valid during the launch: `members`, the group's world ranks.
  uint64_t group = 0;
  uint64_t call_index = 0;
  const std::vector<int64_t>* members = nullptr;
  int peer = -1;
  bool sends = false;
  bool completes = false;  // the completion of a point-to-point operation (a marker)
  double seconds = -1;  // a kernel whose duration is known (a diagnostic that occupies the device): that long
  // A GEMM's (or an implicit GEMM's) shape, when its launcher knows it: `gemm_batch`
  // products of (m x k) by (k x n). 0: not known.
  int64_t gemm_batch = 0, gemm_m = 0, gemm_n = 0, gemm_k = 0;
  // A fused attention kernel: its pass (0: not one, 1: forward, 2: backward),
  // whether its mask is causal, the keys' sequence length, the queries' and the
  // head dim, its heads (the queries' batch x heads) and the query heads that share
  // a key head (grouped-query attention; 0: not known, 1: none share).
  uint8_t attention_pass = 0;
  bool attention_causal = false;
  int64_t attention_sequence = 0;
  int64_t attention_queries = 0, attention_head_dim = 0, attention_heads = 0, attention_group = 0;
};

// Says what the next launch on this thread does. Call it only while observers
// watch (observers::watched()): nobody else reads it.
void describe_next_launch(const LaunchWork& work);
// The description given for the launch being committed on this thread, taken (once).
std::optional<LaunchWork> take_next_launch_work();

// The query heads each key head serves in the next fused attention launch on this thread,
// said by its operator where the kernel simhpu runs cannot show it (its keys repeated per
// query head); taken (once) by whoever describes that launch (0: not said).
void describe_next_attention_group(int64_t query_heads_per_key_head);
int64_t take_next_attention_group();

const char* work_name(Work work);
const char* collective_name(CollectiveKind kind);

} // namespace simhpu
