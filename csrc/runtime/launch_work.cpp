#include "runtime/launch_work.h"

#include <utility>

namespace simhpu {

namespace {
thread_local std::optional<LaunchWork> next_launch_work;
thread_local int64_t next_attention_group = 0;
} // namespace

void describe_next_attention_group(int64_t query_heads_per_key_head) {
  next_attention_group = query_heads_per_key_head;
}

int64_t take_next_attention_group() {
  return std::exchange(next_attention_group, 0);
}

void describe_next_launch(const LaunchWork& work) {
  next_launch_work = work;
}

std::optional<LaunchWork> take_next_launch_work() {
  std::optional<LaunchWork> work = std::move(next_launch_work);
  next_launch_work.reset();
  return work;
}

const char* work_name(Work work) {
  switch (work) {
    case Work::Vector: return "vector";
    case Work::Matrix: return "matrix";
    case Work::HostToDevice: return "host-to-device";
    case Work::DeviceToHost: return "device-to-host";
    case Work::Collective: return "collective";
    case Work::Marker: return "marker";
    case Work::KernelArgument: return "kernel argument";
  }
  return "?";
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Reduce: return "reduce";
    case CollectiveKind::AllToAll: return "all_to_all";
    case CollectiveKind::PointToPoint: return "send/recv";
    case CollectiveKind::Barrier: return "barrier";
  }
  return "?";
}

} // namespace simhpu
