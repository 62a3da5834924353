#include "distributed/process_group.h"

#include "runtime/device.h"
#include "runtime/kernel_arg.h"

#include <torch/csrc/distributed/c10d/FakeProcessGroup.hpp>

#include <atomic>
#include <c10/util/Exception.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <utility>

namespace simhpu {
namespace {

using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<Tensors>;

// Where an operation's tensors are: all on one simhpu device, or all on the CPU.
enum class Placement { Host, Device };

void check_tensor(const char* op, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "simccl ", op, ": got an undefined tensor");
  TORCH_CHECK(t.is_privateuseone() || t.is_cpu(), "simccl ", op, ": expected simhpu (or CPU) tensors, got one on ",
              t.device());
  TORCH_CHECK(t.layout() == c10::kStrided, "simccl ", op, ": expected dense tensors, got layout ", t.layout());
  // The transport sends a tensor's memory as it lies (NCCL asks the same).
  TORCH_CHECK(t.is_cpu() || t.is_contiguous(t.suggest_memory_format()), "simccl ", op,
              ": tensors must be contiguous, got sizes ", t.sizes(), " with strides ", t.strides(),
              "; pass .contiguous()");
}

Placement placement_of(const char* op, std::initializer_list<const Tensors*> lists,
                       std::initializer_list<const TensorLists*> nested = {}) {
  std::optional<c10::Device> device;
  auto visit = [&](const at::Tensor& t) {
    check_tensor(op, t);
    if (!device) {
      device = t.device();
    }
    TORCH_CHECK(*device == t.device(), "simccl ", op, ": expected every tensor on one device, got ", *device,
                " and ", t.device());
  };
  for (const Tensors* list : lists) {
    for (const auto& t : *list) {
      visit(t);
    }
  }
  for (const TensorLists* outer : nested) {
    for (const auto& list : *outer) {
      for (const auto& t : list) {
        visit(t);
      }
    }
  }
  TORCH_CHECK(device, "simccl ", op, ": got no tensors");
  return device->is_cpu() ? Placement::Host : Placement::Device;
}

// The same memory as the CPU sees it: what the transport reads and writes.
at::Tensor host_view(const at::Tensor& t) {
  return describe_tensor(t).cpu_view();
}
Tensors host_views(const Tensors& tensors) {
  Tensors views;
  views.reserve(tensors.size());
  for (const auto& t : tensors) {
    views.push_back(host_view(t));
  }
  return views;
}
TensorLists host_views(const TensorLists& lists) {
  TensorLists views;
  views.reserve(lists.size());
  for (const auto& list : lists) {
    views.push_back(host_views(list));
  }
  return views;
}
Tensors flatten(const TensorLists& lists) {
  Tensors all;
  for (const auto& list : lists) {
    all.insert(all.end(), list.begin(), list.end());
  }
  return all;
}

// How the transport carries out a ReduceOp: PREMUL_SUM, which gloo lacks, is
// the inputs scaled by the factor (a number, or a one-element tensor), then summed.
struct Reduction {
  c10d::ReduceOp transport_op;
  bool premultiply = false;
  double factor = 1.0;
  at::Tensor factor_tensor;  // host view, when the factor is a tensor

  // On the worker (the factor tensor may have just been written).
  double factor_value() const { return factor_tensor.defined() ? factor_tensor.item<double>() : factor; }
  void scale_in_place(const Tensors& views) const {
    if (premultiply) {
      const double f = factor_value();
      for (const auto& v : views) {
        v.mul_(f);
      }
    }
  }
  // Scaled copies, where the inputs must stay as they are.
  Tensors scaled(const Tensors& views) const {
    if (!premultiply) {
      return views;
    }
    const double f = factor_value();
    Tensors copies;
    for (const auto& v : views) {
      copies.push_back(v.mul(f));
    }
    return copies;
  }
};

Reduction reduction_for(const char* op, const c10d::ReduceOp& reduce_op, Tensors& keep_alive) {
  Reduction r{reduce_op};
  if (reduce_op.op_ != c10d::ReduceOp::PREMUL_SUM) {
    return r;
  }
  auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(reduce_op.supplement_.get());
  TORCH_CHECK(supplement != nullptr, "simccl ", op, ": ReduceOp.PREMUL_SUM without a factor");
  r.transport_op = c10d::ReduceOp(c10d::ReduceOp::SUM);
  r.premultiply = true;
  r.factor = supplement->double_factor;
  if (supplement->tensor_factor.defined()) {
    const at::Tensor& t = supplement->tensor_factor;
    TORCH_CHECK(t.numel() == 1, "simccl ", op, ": the PREMUL_SUM factor must have one element, got ", t.numel());
    r.factor_tensor = t.is_cpu() ? t.clone() : host_view(t);
    if (!t.is_cpu()) {
      keep_alive.push_back(t);  // read on the worker, after the caller's stream wrote it
    }
  }
  return r;
}

// What a rank passes in `tensors`: dtype, elements in all, how many.
CallSignature signature_of(const Tensors& tensors) {
  CallSignature s;
  s.tensors = static_cast<int64_t>(tensors.size());
  s.elements = 0;
  for (const auto& t : tensors) s.elements += t.numel();
  if (!tensors.empty()) s.dtype = static_cast<int64_t>(tensors.front().scalar_type());
  return s;
}

CallSignature with_root(CallSignature s, int64_t root) {
  s.root = root;
  return s;
}

CallSignature with_reduce_op(CallSignature s, const c10d::ReduceOp& op) {
  s.reduce_op = static_cast<int64_t>(op.op_);
  return s;
}

// A reduction among simulated peers: each peer is taken to hold what this rank holds (as
// all_to_all_single's answers take it), so a sum is the group's size times this rank's
// value, a product its power, a mean, minimum or maximum the value itself.
void answer_reduction_as_symmetric_peers(const Tensors& views, const c10d::ReduceOp& op, int size) {
  const at::AutoDispatchBelowAutograd below_autograd;
  for (const at::Tensor& v : views) {
    if (v.scalar_type() == at::kBool) continue;  // (a sum of booleans is their or: the value itself)
    switch (op.op_) {
      case c10d::ReduceOp::SUM:
        v.mul_(size);
        break;
      case c10d::ReduceOp::PRODUCT:
        v.copy_(v.pow(size));
        break;
      case c10d::ReduceOp::BXOR:
        if (size % 2 == 0) v.zero_();
        break;
      default:  // AVG, MIN, MAX, BAND, BOR
        break;
    }
  }
}

// reduce_scatter among simulated peers: every peer sends this rank the part of its input that this
// rank's own input holds for this rank, so the output is that part reduced over the group.
void answer_reduce_scatter_as_symmetric_peers(const Tensors& outputs, const Tensors& own_parts,
                                              const c10d::ReduceOp& op, int size) {
  {
    const at::AutoDispatchBelowAutograd below_autograd;
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i].copy_(own_parts[i].reshape(outputs[i].sizes()));
  }
  answer_reduction_as_symmetric_peers(outputs, op, size);
}

// A reduce_scatter form's start among simulated peers: `own_parts` picks, on the worker, this
// rank's part of each input (before PREMUL_SUM's scaling).
template <typename OwnParts>
void answer_reduce_scatter_locally(CollectiveCall& call, Tensors outputs, const Reduction& reduction, int size,
                                   OwnParts own_parts) {
  call.answers_locally = true;
  call.start = [outputs = std::move(outputs), reduction, size, own_parts = std::move(own_parts)]() {
    answer_reduce_scatter_as_symmetric_peers(outputs, reduction.scaled(own_parts()), reduction.transport_op, size);
    return c10::intrusive_ptr<c10d::Work>(c10::make_intrusive<c10d::FakeWork>());
  };
}

// all_reduce, all_reduce_coalesced and reduce: the transport's `operation`
// over host views, after PREMUL_SUM's scaling in place (the tensors are the outputs).
// Among simulated peers the answer is computed here (on `answered`: every rank, or
// reduce's root alone), as the peers would have sent it.
template <typename Options>
CollectiveCall in_place_reduction(const char* name, c10d::OpType type,
                                  const c10::intrusive_ptr<c10d::Backend>& transport, const Tensors& tensors,
                                  const Options& options,
                                  c10::intrusive_ptr<c10d::Work> (c10d::Backend::*operation)(Tensors&, const Options&),
                                  bool simulated_peers, int size, bool answered = true) {
  CollectiveCall call{name, type, {}, tensors};
  call.signature = with_reduce_op(signature_of(tensors), options.reduceOp);
  const Reduction reduction = reduction_for(name, options.reduceOp, call.inputs);
  if (simulated_peers) {
    call.answers_locally = true;
    call.start = [views = host_views(tensors), reduction, size, answered]() {
      reduction.scale_in_place(views);
      if (answered) answer_reduction_as_symmetric_peers(views, reduction.transport_op, size);
      return c10::intrusive_ptr<c10d::Work>(c10::make_intrusive<c10d::FakeWork>());
    };
    return call;
  }
  call.start = [transport, views = host_views(tensors), reduction, opts = options, operation]() mutable {
    reduction.scale_in_place(views);
    opts.reduceOp = reduction.transport_op;
    return ((*transport).*operation)(views, opts);
  };
  return call;
}

void check_multiple(const char* op, const char* what, int64_t big, int64_t small, int size) {
  TORCH_CHECK(big == small * size, "simccl ", op, ": ", what, " must have world size (", size, ") times ", small,
              " elements, got ", big);
}

void check_contiguous(const char* op, const char* what, const at::Tensor& t) {
  TORCH_CHECK(t.is_contiguous(), "simccl ", op, ": the ", what, " must be contiguous (got strides ", t.strides(),
              "); pass .contiguous()");
}

// `t` (contiguous) as `size` equal flat parts, one per rank.
Tensors rank_parts(const at::Tensor& t, int size) {
  return t.reshape(-1).split(t.numel() / size);
}

void check_same_dtype(const char* op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "simccl ", op, ": input and output dtypes differ (",
              b.scalar_type(), " and ", a.scalar_type(), ")");
}

void check_list_length(const char* op, const char* what, size_t length, int size) {
  TORCH_CHECK(static_cast<int>(length) == size, "simccl ", op, ": expected ", what, " of world size (", size,
              ") tensors, got ", length);
}

// An operation on CPU tensors runs from the calling thread, but in the group's
// order: after the device operations launched before it have reached the
// transport, which matches operations between ranks by the order it is given
// them (an object collective behind a queued all-reduce would otherwise meet
// the all-reduce on the other rank).
template <typename Start>
c10::intrusive_ptr<c10d::Work> in_group_order(TransportOrder& order, Start start) {
  const uint64_t ticket = order.take_ticket();
  order.wait_for_turn(ticket);
  try {
    c10::intrusive_ptr<c10d::Work> work = start();
    order.done(ticket);
    return work;
  } catch (...) {
    order.done(ticket);
    throw;
  }
}

} // namespace

namespace {
// Groups take the device's communication streams in the order they are made.
int next_group_channel() {
  static std::atomic<int> groups{0};
  return groups.fetch_add(1, std::memory_order_relaxed);
}

// A key for a group that every process of the world computes alike: its
// members, and how many groups of the same members this process made before
// (torch.distributed makes groups in the same order on every rank).
uint64_t group_key_of(const std::vector<int64_t>& world_ranks) {
  static std::mutex mu;
  static std::map<std::vector<int64_t>, uint64_t> made;
  uint64_t ordinal = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    ordinal = made[world_ranks]++;
  }
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) {
      hash = (hash ^ ((value >> (8 * byte)) & 0xff)) * 1099511628211ull;
    }
  };
  for (int64_t rank : world_ranks) mix(static_cast<uint64_t>(rank));
  mix(ordinal);
  return hash == 0 ? 1 : hash;
}
} // namespace

ProcessGroupSimHPU::ProcessGroupSimHPU(c10::intrusive_ptr<c10d::Backend> transport, int rank, int size,
                                       const std::vector<int64_t>& world_ranks, bool simulated_peers)
    : c10d::Backend(rank, size),
      transport_(std::move(transport)),
      order_(std::make_shared<TransportOrder>(next_group_channel())),
      rank_description_("rank " + std::to_string(rank) + " of " + std::to_string(size)),
      simulated_peers_(simulated_peers) {
  TORCH_CHECK(transport_, "simccl: no transport process group");
  TORCH_CHECK(world_ranks.empty() || static_cast<int>(world_ranks.size()) == size, "simccl: ", world_ranks.size(),
              " world ranks given for a group of ", size);
  world_ranks_ = world_ranks;
  if (world_ranks_.empty()) {
    for (int r = 0; r < size; ++r) world_ranks_.push_back(r);
  }
  group_key_ = group_key_of(world_ranks_);
  if (world_ranks.size() > 1) {
    std::vector<int64_t> sorted = world_ranks;
    std::sort(sorted.begin(), sorted.end());
    first_rank_ = static_cast<int>(sorted.front());
    rank_stride_ = static_cast<int>(sorted[1] - sorted[0]);
    for (size_t i = 2; i < sorted.size(); ++i) {
      if (sorted[i] - sorted[i - 1] != rank_stride_) rank_stride_ = 0;  // not evenly spaced
    }
  } else if (world_ranks.size() == 1) {
    first_rank_ = static_cast<int>(world_ranks.front());
  }
}

namespace {

// all_to_all_single among simulated peers: each peer is taken to send this rank
// what this rank sends itself (its own share of its input), as peers that route
// alike would: an expert-parallel router's token counts, exchanged, stay this
// rank's counts for its own experts from every peer. Where a peer's share is
// not the size of this rank's own (uneven splits), it gets the start of that
// share, repeated; the sizes are what the program gave.
void answer_as_symmetric_peers(const at::Tensor& output, const at::Tensor& input, const std::vector<int64_t>& out_splits,
                               const std::vector<int64_t>& in_splits, int rank, int size) {
  const at::AutoDispatchBelowAutograd below_autograd;
  const int64_t rows_in = input.dim() == 0 ? 0 : input.size(0), rows_out = output.dim() == 0 ? 0 : output.size(0);
  auto share = [size](const std::vector<int64_t>& splits, int64_t rows, int r) {
    if (splits.empty()) return std::pair<int64_t, int64_t>{rows / size * r, rows / size};
    int64_t start = 0;
    for (int i = 0; i < r; ++i) start += splits[i];
    return std::pair<int64_t, int64_t>{start, splits[r]};
  };
  const auto [own_start, own_rows] = share(in_splits, rows_in, rank);
  if (own_rows == 0) return;
  const at::Tensor own = input.narrow(0, own_start, own_rows);
  for (int peer = 0; peer < size; ++peer) {
    const auto [start, rows] = share(out_splits, rows_out, peer);
    int64_t done = 0;
    while (done < rows) {
      const int64_t n = std::min(rows - done, own_rows);
      output.narrow(0, start + done, n).copy_(own.narrow(0, 0, n));
      done += n;
    }
  }
}

} // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::launch(CollectiveCall call) {
  if (!call.point_to_point && collective_checks_enabled() && !simulated_peers_) {
    call.signature.collective = static_cast<int64_t>(call.type);
    call.start = [transport = transport_, name = call.name, signature = call.signature,
                  start = std::move(call.start)]() {
      check_ranks_agree(*transport, name, signature);
      return start();
    };
  }
  call.ranks = size_;
  call.first_rank = first_rank_;
  call.rank_stride = rank_stride_;
  call.group = group_key_;
  call.members = &world_ranks_;
  if (!call.point_to_point) {
    call.call_index = calls_.fetch_add(1, std::memory_order_relaxed);
  }
  return launch_collective(order_, rank_, rank_description_, std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) {
  if (placement_of("broadcast", {&tensors}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->broadcast(tensors, opts); });
  }
  CollectiveCall call{"broadcast", c10d::OpType::BROADCAST, {}, tensors};
  call.signature = with_root(signature_of(tensors), opts.rootRank);
  call.start = [transport = transport_, views = host_views(tensors), opts = opts]() mutable {
    return transport->broadcast(views, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  if (placement_of("all_reduce", {&tensors}) == Placement::Host) {
    return in_group_order(*order_, [&] {
      return simulated_peers_ ? answer_on_host(tensors, opts.reduceOp, true) : transport_->allreduce(tensors, opts);
    });
  }
  return launch(
      in_place_reduction("all_reduce", c10d::OpType::ALLREDUCE, transport_, tensors, opts, &c10d::Backend::allreduce,
                         simulated_peers_, size_));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::answer_on_host(Tensors& tensors, const c10d::ReduceOp& op,
                                                                  bool answered) {
  Tensors keep_alive;
  const Reduction reduction = reduction_for("all_reduce", op, keep_alive);
  reduction.scale_in_place(tensors);
  if (answered) answer_reduction_as_symmetric_peers(tensors, reduction.transport_op, size_);
  return c10::make_intrusive<c10d::FakeWork>();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::allreduce_coalesced(Tensors& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  if (placement_of("all_reduce_coalesced", {&tensors}) == Placement::Host) {
    return in_group_order(*order_, [&] {
      return simulated_peers_ ? answer_on_host(tensors, opts.reduceOp, true)
                              : transport_->allreduce_coalesced(tensors, opts);
    });
  }
  return launch(in_place_reduction("all_reduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, transport_, tensors,
                                   opts, &c10d::Backend::allreduce_coalesced, simulated_peers_, size_));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  if (placement_of("reduce", {&tensors}) == Placement::Host) {
    return in_group_order(*order_, [&] {
      return simulated_peers_ ? answer_on_host(tensors, opts.reduceOp, opts.rootRank == rank_)
                              : transport_->reduce(tensors, opts);
    });
  }
  CollectiveCall call = in_place_reduction("reduce", c10d::OpType::REDUCE, transport_, tensors, opts,
                                           &c10d::Backend::reduce, simulated_peers_, size_, opts.rootRank == rank_);
  call.signature.root = opts.rootRank;
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::allgather(TensorLists& outputs, Tensors& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  if (placement_of("all_gather", {&inputs}, {&outputs}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->allgather(outputs, inputs, opts); });
  }
  for (const auto& list : outputs) {
    check_list_length("all_gather", "output lists", list.size(), size_);
  }
  CollectiveCall call{"all_gather", c10d::OpType::ALLGATHER, inputs, flatten(outputs)};
  call.signature = signature_of(inputs);
  call.start = [transport = transport_, out = host_views(outputs), in = host_views(inputs), opts = opts]() mutable {
    return transport->allgather(out, in, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  Tensors in{input}, out{output};
  if (placement_of("all_gather_into_tensor", {&in, &out}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->_allgather_base(output, input, opts); });
  }
  check_same_dtype("all_gather_into_tensor", output, input);
  check_contiguous("all_gather_into_tensor", "output", output);
  check_multiple("all_gather_into_tensor", "the output", output.numel(), input.numel(), size_);
  CollectiveCall call{"all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, in, out};
  call.signature = signature_of(in);
  // As the list form, over one view per rank's part of the output (gloo's
  // tensor form expects the output shaped [world size, *input shape]).
  call.answers_locally = simulated_peers_;  // (the fake transport writes this rank's input to every part)
  call.start = [transport = transport_, parts = TensorLists{rank_parts(host_view(output), size_)},
                i = Tensors{host_view(input).reshape(-1)}, opts = opts]() mutable {
    return transport->allgather(parts, i, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                                                                     const c10d::AllgatherOptions& opts) {
  if (placement_of("all_gather_coalesced", {&inputs}, {&outputs}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->allgather_coalesced(outputs, inputs, opts); });
  }
  CollectiveCall call{"all_gather_coalesced", c10d::OpType::ALLGATHER_COALESCED, inputs, flatten(outputs)};
  call.signature = signature_of(inputs);
  call.start = [transport = transport_, out = host_views(outputs), in = host_views(inputs), opts = opts]() mutable {
    return transport->allgather_coalesced(out, in, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  if (placement_of("all_gather_into_tensor_coalesced", {&inputs, &outputs}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->allgather_into_tensor_coalesced(outputs, inputs, opts); });
  }
  TORCH_CHECK(outputs.size() == inputs.size(), "simccl all_gather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_multiple("all_gather_into_tensor_coalesced", "each output", outputs[i].numel(), inputs[i].numel(), size_);
  }
  CollectiveCall call{"all_gather_into_tensor_coalesced", c10d::OpType::COALESCED, inputs, outputs};
  call.signature = signature_of(inputs);
  call.start = [transport = transport_, out = host_views(outputs), in = host_views(inputs), opts = opts]() mutable {
    return transport->allgather_into_tensor_coalesced(out, in, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::gather(TensorLists& outputs, Tensors& inputs,
                                                        const c10d::GatherOptions& opts) {
  if (placement_of("gather", {&inputs}, {&outputs}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->gather(outputs, inputs, opts); });
  }
  CollectiveCall call{"gather", c10d::OpType::GATHER, inputs, flatten(outputs)};
  call.signature = with_root(signature_of(inputs), opts.rootRank);
  call.start = [transport = transport_, out = host_views(outputs), in = host_views(inputs), opts = opts]() mutable {
    return transport->gather(out, in, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::scatter(Tensors& outputs, TensorLists& inputs,
                                                         const c10d::ScatterOptions& opts) {
  if (placement_of("scatter", {&outputs}, {&inputs}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->scatter(outputs, inputs, opts); });
  }
  CollectiveCall call{"scatter", c10d::OpType::SCATTER, flatten(inputs), outputs};
  call.signature = with_root(signature_of(outputs), opts.rootRank);
  call.start = [transport = transport_, out = host_views(outputs), in = host_views(inputs), opts = opts]() mutable {
    return transport->scatter(out, in, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::reduce_scatter(Tensors& outputs, TensorLists& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  if (placement_of("reduce_scatter", {&outputs}, {&inputs}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->reduce_scatter(outputs, inputs, opts); });
  }
  for (const auto& list : inputs) {
    check_list_length("reduce_scatter", "input lists", list.size(), size_);
  }
  CollectiveCall call{"reduce_scatter", c10d::OpType::REDUCE_SCATTER, flatten(inputs), outputs};
  call.signature = with_reduce_op(signature_of(outputs), opts.reduceOp);
  const Reduction reduction = reduction_for(call.name, opts.reduceOp, call.inputs);
  if (simulated_peers_) {
    answer_reduce_scatter_locally(call, host_views(outputs), reduction, size_, [in = host_views(inputs), rank = rank_] {
      Tensors own;
      for (const auto& list : in) own.push_back(list[rank]);
      return own;
    });
    return launch(std::move(call));
  }
  call.start = [transport = transport_, out = host_views(outputs), in = host_views(inputs), reduction,
                opts = opts]() mutable {
    TensorLists sources;
    for (const auto& list : in) {
      sources.push_back(reduction.scaled(list));
    }
    opts.reduceOp = reduction.transport_op;
    return transport->reduce_scatter(out, sources, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  Tensors in{input}, out{output};
  if (placement_of("reduce_scatter_tensor", {&in, &out}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->_reduce_scatter_base(output, input, opts); });
  }
  check_same_dtype("reduce_scatter_tensor", output, input);
  check_contiguous("reduce_scatter_tensor", "input", input);
  check_multiple("reduce_scatter_tensor", "the input", input.numel(), output.numel(), size_);
  CollectiveCall call{"reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, in, out};
  call.signature = with_reduce_op(signature_of(out), opts.reduceOp);
  const Reduction reduction = reduction_for(call.name, opts.reduceOp, call.inputs);
  if (simulated_peers_) {
    answer_reduce_scatter_locally(call, Tensors{host_view(output).reshape(-1)}, reduction, size_,
                                  [i = host_view(input), rank = rank_, size = size_] {
                                    return Tensors{rank_parts(i, size)[rank]};
                                  });
    return launch(std::move(call));
  }
  // As the list form, over one view per rank's part of the input.
  call.start = [transport = transport_, o = Tensors{host_view(output).reshape(-1)}, i = host_view(input), reduction,
                size = size_, opts = opts]() mutable {
    TensorLists parts{rank_parts(reduction.scaled({i}).front(), size)};
    opts.reduceOp = reduction.transport_op;
    return transport->reduce_scatter(o, parts, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  if (placement_of("reduce_scatter_tensor_coalesced", {&inputs, &outputs}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->reduce_scatter_tensor_coalesced(outputs, inputs, opts); });
  }
  TORCH_CHECK(outputs.size() == inputs.size(), "simccl reduce_scatter_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_multiple("reduce_scatter_tensor_coalesced", "each input", inputs[i].numel(), outputs[i].numel(), size_);
  }
  CollectiveCall call{"reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED, inputs, outputs};
  call.signature = with_reduce_op(signature_of(outputs), opts.reduceOp);
  const Reduction reduction = reduction_for(call.name, opts.reduceOp, call.inputs);
  if (simulated_peers_) {
    answer_reduce_scatter_locally(call, host_views(outputs), reduction, size_,
                                  [in = host_views(inputs), rank = rank_, size = size_] {
                                    Tensors own;
                                    for (const auto& t : in) own.push_back(rank_parts(t, size)[rank]);
                                    return own;
                                  });
    return launch(std::move(call));
  }
  call.start = [transport = transport_, out = host_views(outputs), in = host_views(inputs), reduction,
                opts = opts]() mutable {
    Tensors sources = reduction.scaled(in);
    opts.reduceOp = reduction.transport_op;
    return transport->reduce_scatter_tensor_coalesced(out, sources, opts);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& output_split_sizes,
                                                               std::vector<int64_t>& input_split_sizes,
                                                               const c10d::AllToAllOptions& opts) {
  Tensors in{input}, out{output};
  if (placement_of("all_to_all_single", {&in, &out}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->alltoall_base(output, input, output_split_sizes, input_split_sizes, opts); });
  }
  check_same_dtype("all_to_all_single", output, input);
  for (const auto* splits : {&output_split_sizes, &input_split_sizes}) {
    TORCH_CHECK(splits->empty() || static_cast<int>(splits->size()) == size_, "simccl all_to_all_single: expected ",
                size_, " split sizes (one per rank) or none, got ", splits->size());
  }
  CollectiveCall call{"all_to_all_single", c10d::OpType::ALLTOALL_BASE, in, out};
  call.signature = signature_of(in);
  if (!input_split_sizes.empty() || !output_split_sizes.empty()) {
    call.signature.elements = -1;  // uneven splits: each rank's share may differ
  }
  call.answers_locally = simulated_peers_;
  if (simulated_peers_) {
    call.start = [o = host_view(output), i = host_view(input), out_splits = output_split_sizes,
                  in_splits = input_split_sizes, rank = rank_, size = size_]() {
      answer_as_symmetric_peers(o, i, out_splits, in_splits, rank, size);
      return c10::make_intrusive<c10d::FakeWork>();
    };
  } else {
    call.start = [transport = transport_, o = host_view(output), i = host_view(input),
                  out_splits = output_split_sizes, in_splits = input_split_sizes, opts = opts]() mutable {
      return transport->alltoall_base(o, i, out_splits, in_splits, opts);
    };
  }
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::alltoall(Tensors& outputs, Tensors& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  if (placement_of("all_to_all", {&inputs, &outputs}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->alltoall(outputs, inputs, opts); });
  }
  check_list_length("all_to_all", "inputs", inputs.size(), size_);
  check_list_length("all_to_all", "outputs", outputs.size(), size_);
  CollectiveCall call{"all_to_all", c10d::OpType::ALLTOALL, inputs, outputs};
  call.signature = signature_of(inputs);
  call.signature.elements = -1;  // each rank's tensors may differ in size
  call.start = [transport = transport_, out = host_views(outputs), in = host_views(inputs), opts = opts]() mutable {
    return transport->alltoall(out, in, opts);
  };
  return launch(std::move(call));
}

void ProcessGroupSimHPU::address_point_to_point(CollectiveCall& call, int peer, bool sends) {
  if (peer < 0 || peer >= size_) return;  // (the transport says what is wrong with it)
  call.peer = static_cast<int>(world_ranks_[static_cast<size_t>(peer)]);
  std::lock_guard<std::mutex> lock(point_to_point_mu_);
  call.call_index = point_to_point_calls_[{peer, sends}]++;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::send(Tensors& tensors, int dst_rank, int tag) {
  if (placement_of("send", {&tensors}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->send(tensors, dst_rank, tag); });
  }
  CollectiveCall call{"send", c10d::OpType::SEND, tensors, {}};
  call.point_to_point = true;
  address_point_to_point(call, dst_rank, /*sends=*/true);
  call.start = [transport = transport_, views = host_views(tensors), dst_rank, tag]() mutable {
    return transport->send(views, dst_rank, tag);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::recv(Tensors& tensors, int src_rank, int tag) {
  if (placement_of("recv", {&tensors}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->recv(tensors, src_rank, tag); });
  }
  CollectiveCall call{"recv", c10d::OpType::RECV, {}, tensors};
  call.point_to_point = true;
  address_point_to_point(call, src_rank, /*sends=*/false);
  call.start = [transport = transport_, views = host_views(tensors), src_rank, tag]() mutable {
    return transport->recv(views, src_rank, tag);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::recvAnysource(Tensors& tensors, int tag) {
  if (placement_of("recv", {&tensors}) == Placement::Host) {
    return in_group_order(*order_, [&] { return transport_->recvAnysource(tensors, tag); });
  }
  CollectiveCall call{"recv", c10d::OpType::RECVANYSOURCE, {}, tensors};
  call.point_to_point = true;
  call.start = [transport = transport_, views = host_views(tensors), tag]() mutable {
    return transport->recvAnysource(views, tag);
  };
  return launch(std::move(call));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSimHPU::barrier(const c10d::BarrierOptions& opts) {
  // On the device the caller names, else the current one: behind the work
  // queued there, as NCCL's barrier is.
  c10::DeviceIndex index = current_device();
  if (opts.device && opts.device->is_privateuseone() && opts.device->has_index()) {
    index = opts.device->index();
  } else if (!opts.device_ids.empty()) {
    check_device_index(opts.device_ids.front(), "barrier");
    index = static_cast<c10::DeviceIndex>(opts.device_ids.front());
  }
  CollectiveCall call{"barrier", c10d::OpType::BARRIER};
  call.device = device_of(index);
  call.blocks_host = true;
  call.start = [transport = transport_, opts = opts]() mutable { return transport->barrier(opts); };
  return launch(std::move(call));
}

} // namespace simhpu
