#pragma once
// ProcessGroupSimHPU: the torch.distributed backend for simhpu tensors
// ("simccl", registered by torch_simhpu/distributed.py).
//
// With simulated peers (python -m torch_simhpu.simulation --world N), the
// transport is torch's FakeProcessGroup: one process plays one rank, the others
// are absent, and operations complete having moved no data; their price is the
// group's, placed where its world ranks put it.
//
// The transport is a gloo process group over the same ranks (TCP on this
// machine or across machines). Every operation on simhpu tensors is device
// work on the communication stream (distributed/collective.h) that hands gloo
// host views of the device memory; operations on CPU tensors go to gloo as
// they are. ReduceOp.PREMUL_SUM, which gloo lacks, is a scaling then a sum.
#include "distributed/collective.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <memory>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace simhpu {

class ProcessGroupSimHPU final : public c10d::Backend {
 public:
  // `world_ranks`: the group's members in the world (empty: 0..size-1).
  ProcessGroupSimHPU(c10::intrusive_ptr<c10d::Backend> transport, int rank, int size,
                     const std::vector<int64_t>& world_ranks = {}, bool simulated_peers = false);

  const std::string getBackendName() const override { return "simccl"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void setTimeout(std::chrono::milliseconds timeout) override { transport_->setTimeout(timeout); }
  void abort() override { transport_->abort(); }
  void shutdown() override { transport_->shutdown(); }

 private:
  c10::intrusive_ptr<c10d::Work> launch(CollectiveCall call);
  // A reduction of CPU tensors among simulated peers, answered in place where `answered` (every
  // rank, or reduce's root alone; process_group.cpp).
  c10::intrusive_ptr<c10d::Work> answer_on_host(std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op,
                                                bool answered);
  // Which of the calls between this rank and `peer` (a group rank) a send or recv is.
  void address_point_to_point(CollectiveCall& call, int peer, bool sends);

  c10::intrusive_ptr<c10d::Backend> transport_;
  std::shared_ptr<TransportOrder> order_;  // (and the group's communication stream)
  std::string rank_description_;  // "rank 0 of 2"
  int first_rank_ = 0, rank_stride_ = 1;  // where the group sits in the world (see CollectiveCall)
  std::vector<int64_t> world_ranks_;  // the members' world ranks, by group rank
  uint64_t group_key_ = 0;  // the same in every process of the world (launch_work.h)
  std::atomic<uint64_t> calls_{0};
  std::mutex point_to_point_mu_;
  std::map<std::pair<int, bool>, uint64_t> point_to_point_calls_;  // by (peer, sends)
  bool simulated_peers_ = false;
};

} // namespace simhpu
