#include "simclock/launch_cost.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_set>

namespace simhpu::simclock {

namespace {

struct TensorTotals {
  double bytes = 0;
  double largest = 0;  // elements of the largest tensor
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool any = false;
};

void add_tensor(TensorTotals& totals, const DeviceTensor& t) {
  if (t.dtype == c10::ScalarType::Undefined) return;
  const double n = static_cast<double>(t.numel());
  totals.any = true;
  if (t.dim() > 0) {
    // (a 0-dim operand is priced as a kernel argument, as a Python number is)
    totals.bytes += n * static_cast<double>(c10::elementSize(t.dtype));
  }
  totals.largest = std::max(totals.largest, n);
  const bool floating = c10::isFloatingType(t.dtype) || c10::isComplexType(t.dtype);
  if (totals.dtype == c10::ScalarType::Undefined ||
      (floating && !c10::isFloatingType(totals.dtype) && !c10::isComplexType(totals.dtype))) {
    totals.dtype = t.dtype;
  }
}

// A GEMM's compute and memory time as the part's GEMM library would run it:
// the fastest of the profile's tiles and split-K factors. Output tiles run in
// waves of one a unit, so a partial tile costs a whole one and a partial last
// wave a whole wave (NVIDIA's "Matrix Multiplication Background" guide: tile and
// wave quantisation); splitting K over several units fills a part a few tiles
// would leave idle, at the price of writing and reading back float32 partial sums.
// A unit writes its tile's outputs after the tile's K loop, at its share of the
// memory bandwidth, before it starts its next tile: the epilogue is part of each
// wave (it dominates a GEMM with a short K).
struct Roofline {
  double compute, memory;
};
std::optional<Roofline> gemm_roofline(const LaunchWork& cost, const DeviceProfile& p, double peak_flops) {
  if (cost.work != Work::Matrix || p.matrix_units <= 0 || p.matrix_tiles.empty() || cost.gemm_m <= 0 ||
      cost.gemm_n <= 0 || cost.gemm_k <= 0 || cost.gemm_batch <= 0) {
    return std::nullopt;
  }
  const double unit_rate = peak_flops * p.matrix_efficiency / p.matrix_units;
  const double memory_rate = p.memory_bandwidth * p.memory_efficiency;
  // (outputs at least 16-bit: an FP8 GEMM writes bfloat16 or wider)
  const double output_size = std::max<double>(c10::elementSize(cost.dtype), 2);
  const double batch = static_cast<double>(cost.gemm_batch), k = static_cast<double>(cost.gemm_k);
  const double outputs = batch * static_cast<double>(cost.gemm_m) * static_cast<double>(cost.gemm_n);
  auto tiles_along = [](int64_t extent, int tile) { return static_cast<double>((extent + tile - 1) / tile); };
  std::optional<Roofline> best;
  for (const DeviceProfile::Tile& tile : p.matrix_tiles) {
    const double tiles = batch * tiles_along(cost.gemm_m, tile.m) * tiles_along(cost.gemm_n, tile.n);
    for (int split = 1; split <= std::max(p.matrix_split_k, 1); split *= 2) {
      const double waves = std::ceil(tiles * split / p.matrix_units);
      const double k_each = std::ceil(k / split);
      const double partial_sums = split > 1 ? 2.0 * split * outputs * sizeof(float) : 0.0;
      const double tile_seconds = 2.0 * tile.m * tile.n * k_each / unit_rate +
                                  tile.m * tile.n * output_size / (memory_rate / p.matrix_units);
      const Roofline candidate{waves * tile_seconds, (cost.bytes + partial_sums) / memory_rate};
      if (!best || std::max(candidate.compute, candidate.memory) < std::max(best->compute, best->memory)) {
        best = candidate;
      }
    }
  }
  return best;
}

// A fused attention kernel's compute time by the profile's curve for its pass,
// if it has one: the kernel skips a causal mask's masked half.
std::optional<double> attention_seconds(const LaunchWork& cost, const DeviceProfile& p) {
  if (cost.work != Work::Matrix || cost.attention_pass == 0) return std::nullopt;
  const AttentionCurve& curve = cost.attention_pass == 1 ? p.attention_forward : p.attention_backward;
  if (!curve.known() || cost.attention_sequence <= 0) return std::nullopt;
  const std::vector<double>& rates =
      cost.attention_causal && !curve.causal_flops.empty() ? curve.causal_flops : curve.flops;
  const double x = std::log2(static_cast<double>(cost.attention_sequence));
  double rate = rates.front();
  if (x >= std::log2(curve.sequence.back())) {
    rate = rates.back();
  } else {
    for (size_t i = 1; i < curve.sequence.size(); ++i) {
      const double x0 = std::log2(curve.sequence[i - 1]), x1 = std::log2(curve.sequence[i]);
      if (x < x1) {
        const double t = std::clamp((x - x0) / (x1 - x0), 0.0, 1.0);
        rate = rates[i - 1] + t * (rates[i] - rates[i - 1]);
        break;
      }
    }
  }
  return cost.flops * (cost.attention_causal ? 0.5 : 1.0) / rate;
}

double log2_ceil(int n) {
  return std::ceil(std::log2(static_cast<double>(std::max(n, 1))));
}

} // namespace

void complete_from_record(LaunchWork& cost, const LaunchRecord& record) {
  TensorTotals totals;
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg)) {
      add_tensor(totals, *t);
    } else if (const auto* list = std::get_if<std::vector<DeviceTensor>>(&arg)) {
      for (const DeviceTensor& t : *list) add_tensor(totals, t);
    }
  }
  if (!totals.any) {
    // Payload kernels (collectives, compiled code handed storages): what they hold.
    std::unordered_set<const void*> seen;
    for (const c10::Storage& s : record.keep_alive) {
      if (seen.insert(s.unsafeGetStorageImpl()).second) {
        totals.bytes += static_cast<double>(s.nbytes());
      }
    }
  }
  if (cost.bytes < 0) cost.bytes = totals.bytes;
  if (cost.flops < 0) cost.flops = cost.work == Work::Vector ? totals.largest : 0;
  if (cost.dtype == c10::ScalarType::Undefined) cost.dtype = totals.dtype;
}

Timing time_of(const LaunchWork& cost, const DeviceProfile& p) {
  if (cost.seconds >= 0) {
    return {cost.seconds, Bound::Latency, 0};
  }
  switch (cost.work) {
    case Work::Marker:
    case Work::KernelArgument:
      return {};
    case Work::HostToDevice:
    case Work::DeviceToHost: {
      const double peak = cost.pageable ? p.pageable_bandwidth : p.host_link.bandwidth;
      const double seconds = p.host_link.latency + cost.bytes / (peak * p.host_link_efficiency);
      return {seconds, Bound::HostLink, cost.bytes / seconds / peak};
    }
    case Work::Collective:
      return {collective_seconds(cost.collective, cost.bytes, cost.ranks,
                                 nodes_spanned(cost.ranks, cost.first_rank, cost.rank_stride, p), p),
              Bound::Fabric, 0};
    case Work::Vector:
    case Work::Matrix:
      break;
  }
  const c10::ScalarType dtype = cost.dtype == c10::ScalarType::Undefined ? c10::ScalarType::Float : cost.dtype;
  const bool matrix = cost.work == Work::Matrix;
  const double peak_flops = (matrix ? p.matrix_flops : p.vector_flops)[static_cast<size_t>(dtype)];
  double memory = cost.bytes / (p.memory_bandwidth * p.memory_efficiency);
  double compute = 0;
  if (const auto attention = attention_seconds(cost, p)) {
    compute = *attention;
  } else if (const auto gemm = gemm_roofline(cost, p, peak_flops)) {
    compute = gemm->compute;
    memory = gemm->memory;
  } else {
    compute = cost.flops / (peak_flops * (matrix ? p.matrix_efficiency : p.vector_efficiency));
  }
  const double seconds = p.kernel_overhead + std::max(compute, memory);
  const double flops_fraction = cost.flops / seconds / peak_flops;
  const double bytes_fraction = cost.bytes / seconds / p.memory_bandwidth;
  if (std::max(compute, memory) <= p.kernel_overhead) {
    return {seconds, Bound::Latency, std::max(flops_fraction, bytes_fraction)};
  }
  return compute >= memory ? Timing{seconds, Bound::Compute, flops_fraction}
                           : Timing{seconds, Bound::Memory, bytes_fraction};
}

int nodes_spanned(int ranks, int first_rank, int rank_stride, const DeviceProfile& p) {
  const int per_node = std::max(p.devices_per_node, 1);
  if (ranks <= 1) return 1;
  if (rank_stride <= 0) return (ranks + per_node - 1) / per_node;  // (packed, the least it can span)
  if (rank_stride >= per_node) return ranks;
  const int64_t last = static_cast<int64_t>(first_rank) + static_cast<int64_t>(ranks - 1) * rank_stride;
  return static_cast<int>(last / per_node - first_rank / per_node + 1);
}

CollectiveCost collective_cost(CollectiveKind kind, double bytes, int ranks, int nodes, const DeviceProfile& p) {
  const int n = std::max(ranks, 1);
  if (n == 1) return {p.kernel_overhead, p.kernel_overhead};  // a local copy at most
  const Link& link = nodes <= 1 ? p.intra_node : p.inter_node;
  const double bw = link.bandwidth * p.fabric_efficiency;
  const double a = link.latency;
  const double steps = static_cast<double>(n - 1);
  const double share = steps / n;  // of the buffer each rank sends per ring pass
  // An algorithm's cost: its latency, and its transfer time.
  auto cost = [](double latency, double transfer) { return CollectiveCost{latency + transfer, latency}; };
  auto faster = [](CollectiveCost x, CollectiveCost y) { return x.seconds <= y.seconds ? x : y; };
  // Hierarchical, for a group with several ranks in each of several nodes: inside
  // each node over its links (or its switch, when it reduces), between nodes over
  // every rank's own link at once, each carrying a node's share. NCCL pipelines
  // the two (its rings and trees cross NVLink and the NICs chunk by chunk), so
  // the slower of them sets the time; the flat ring would send everything at one
  // link's speed. `passes`: 2 for an all_reduce (its reduce-scatter and
  // all-gather halves), 1 for a gather or a scatter.
  const int per_node = (n + std::max(nodes, 1) - 1) / std::max(nodes, 1);
  const bool layered = nodes > 1 && per_node > 1;
  auto hierarchical = [&](double passes) {
    const double g = per_node, m = nodes;
    double inside = passes * (g - 1) / g * bytes / (p.intra_node.bandwidth * p.fabric_efficiency);
    if (passes == 2 && p.switch_reduction_bandwidth > 0) {
      inside = std::min(inside, bytes / p.switch_reduction_bandwidth);
    }
    const double between = passes * (m - 1) / m * (bytes / g) / bw;
    return cost(passes * ((g - 1) * p.intra_node.latency + (m - 1) * p.inter_node.latency),
                std::max(inside, between));
  };
  switch (kind) {
    case CollectiveKind::AllReduce: {
      CollectiveCost flat = faster(cost(2 * steps * a, 2 * share * bytes / bw),   // ring
                                   cost(2 * log2_ceil(n) * a, 2 * bytes / bw));    // tree
      if (nodes <= 1 && p.switch_reduction_bandwidth > 0) {
        // The switch reduces: each device sends its buffer once and receives the sum once.
        const double latency = p.switch_reduction_latency > 0 ? p.switch_reduction_latency : 2 * a;  // (up, down)
        flat = faster(flat, cost(latency, bytes / p.switch_reduction_bandwidth));
      }
      return layered ? faster(flat, hierarchical(2)) : flat;
    }
    case CollectiveKind::AllGather:      // bytes: the gathered whole
    case CollectiveKind::ReduceScatter: {  // bytes: the input whole
      const CollectiveCost ring = cost(steps * a, share * bytes / bw);
      return layered ? faster(ring, hierarchical(1)) : ring;
    }
    case CollectiveKind::AllToAll:
      return cost(steps * a, share * bytes / bw);
    case CollectiveKind::Broadcast:
    case CollectiveKind::Reduce:
      return faster(cost(steps * a, bytes / bw),                           // pipelined along a ring
                    cost(log2_ceil(n) * a, log2_ceil(n) * bytes / bw));    // tree
    case CollectiveKind::PointToPoint:
      return cost(a, bytes / bw);
    case CollectiveKind::Barrier:
      return cost(2 * log2_ceil(n) * a, 0);
  }
  return {0, 0};
}

double collective_seconds(CollectiveKind kind, double bytes, int ranks, int nodes, const DeviceProfile& p) {
  return collective_cost(kind, bytes, ranks, nodes, p).seconds;
}

const char* bound_name(Bound bound) {
  switch (bound) {
    case Bound::Compute: return "compute";
    case Bound::Memory: return "memory";
    case Bound::Latency: return "latency";
    case Bound::HostLink: return "host-link";
    case Bound::Fabric: return "fabric";
    case Bound::None: return "none";
  }
  return "?";
}

} // namespace simhpu::simclock
