#pragma once
// Collectives as device work (the mechanism behind ProcessGroupSimHPU).
//
// A collective on simhpu tensors is queued on its device's communication
// stream behind everything the caller's current stream had queued, so it reads
// what the device has finished writing. The stream's worker hands it to the
// transport (gloo, over host views of the same device memory: nothing is
// staged through the host) and waits for it, as a communication kernel
// occupies its stream. The host returns at once. The Work it returns makes the
// caller's current stream wait for the collective, not the host (as NCCL's do).
//
// Point-to-point operations are started on the communication stream but not
// waited for there: a send completes only when its peer receives, and a
// program may legitimately send before it receives. Waiting on their Work is
// what makes the caller's stream wait for completion.
#include "distributed/call_agreement.h"

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace simhpu {

// The order a process group's operations reach its transport. The transport
// matches operations between ranks by the order it was given them, but the
// operations of one group may run on several devices' communication streams
// (several devices per process); each takes a ticket when launched and waits
// for its turn on the worker. An operation that never runs (a launch dropped,
// or skipped after an earlier failure) gives its turn up.
class TransportOrder {
 public:
  // `channel`: the group's communication stream (runtime/streams.h).
  explicit TransportOrder(int channel) : channel_(channel) {}
  int channel() const { return channel_; }
  uint64_t take_ticket();
  void wait_for_turn(uint64_t ticket);
  void done(uint64_t ticket);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ticket_ = 0;
  uint64_t next_turn_ = 0;
  std::set<uint64_t> done_early_;
  const int channel_;
};

// One collective, as the process group describes it.
struct CollectiveCall {
  const char* name = "";  // as torch.distributed calls it ("all_reduce"): errors, traces
  c10d::OpType type = c10d::OpType::UNKNOWN;
  std::vector<at::Tensor> inputs;   // simhpu tensors it reads
  std::vector<at::Tensor> outputs;  // simhpu tensors it writes: the Work's result
  // Runs on the worker: starts the transport's operation (over host views of
  // the tensors) and returns its Work.
  std::function<c10::intrusive_ptr<c10d::Work>()> start;
  std::optional<c10::Device> device;  // where it runs, for one without tensors (barrier)
  // What the other ranks' calls must agree on (checked before `start`; see call_agreement.h).
  CallSignature signature;
  bool point_to_point = false;
  bool blocks_host = false;  // barrier: wait() returns once every rank has arrived
  int ranks = 1;  // the group's size (simulated time prices the collective by it)
  int first_rank = 0, rank_stride = 1;  // where the group sits in the world (launch_work.h)
  // Which call of which group this is, alike in every process (launch_work.h).
  uint64_t group = 0, call_index = 0;
  const std::vector<int64_t>* members = nullptr;
  int peer = -1;  // point to point: the peer's world rank (-1: any)
  // `start` moves nothing between processes (simulated peers: see process_group.h),
  // and what it writes is its answer for them, so it may run over known values.
  bool answers_locally = false;
};

// Queues `call` on the communication stream of its tensors' device and
// returns its Work. `rank_description` ("rank 0 of 2") goes into messages.
c10::intrusive_ptr<c10d::Work> launch_collective(const std::shared_ptr<TransportOrder>& order, int rank,
                                                 const std::string& rank_description, CollectiveCall call);

} // namespace simhpu
