#include "distributed/collective.h"

#include "runtime/events.h"
#include "runtime/launch_record.h"
#include "runtime/launch_site.h"
#include "runtime/observers.h"
#include "runtime/streams.h"

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace simhpu {

uint64_t TransportOrder::take_ticket() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_ticket_++;
}

void TransportOrder::wait_for_turn(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return next_turn_ == ticket; });
}

void TransportOrder::done(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ticket != next_turn_) {
    done_early_.insert(ticket);
    return;
  }
  ++next_turn_;
  while (!done_early_.empty() && *done_early_.begin() == next_turn_) {
    done_early_.erase(done_early_.begin());
    ++next_turn_;
  }
  cv_.notify_all();
}

namespace {

LaunchWork collective_work(const CollectiveCall& call);  // (below)

// What the launching thread, the communication worker and the Work share
// about one operation.
struct Operation {
  Operation(CollectiveCall c, std::shared_ptr<TransportOrder> o, std::string r)
      : call(std::move(c)), order(std::move(o)), rank(std::move(r)) {}

  CollectiveCall call;
  std::shared_ptr<TransportOrder> order;
  // Taken while the start record's slot is held (see launch_collective), so
  // tickets follow the communication stream's order whichever threads launch.
  uint64_t ticket = 0;
  const std::string rank;  // "rank 0 of 2", for messages

  std::mutex mu;
  std::condition_variable cv;
  bool started = false;  // the transport has it (or it failed to start, or never will)
  c10::intrusive_ptr<c10d::Work> transfer;
  std::exception_ptr error;
  std::once_flag completion;

  std::string describe_failure(const std::string& what) const {
    return "simccl " + std::string(call.name) + " on " + rank + " failed: " + what;
  }

  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) {
      error = std::make_exception_ptr(std::runtime_error(describe_failure(what)));
    }
    started = true;
    cv.notify_all();
  }

  // On the worker, in the group's order.
  void start() {
    order->wait_for_turn(ticket);
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = call.start();
    } catch (const c10::Error& e) {  // (its what() carries a C++ backtrace)
      order->done(ticket);
      fail(e.what_without_backtrace());
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      order->done(ticket);
      fail(e.what());
      std::rethrow_exception(error);
    }
    order->done(ticket);
    std::lock_guard<std::mutex> lock(mu);
    transfer = std::move(work);
    started = true;
    cv.notify_all();
  }

  // The launching side's references to the inputs (launch records keep their
  // memory until they ran; the transport works on host views made at launch).
  void release_inputs() {
    std::vector<at::Tensor> inputs;
    {
      std::lock_guard<std::mutex> lock(mu);
      inputs.swap(call.inputs);
    }
  }

  // Waits for the transport (once, whoever asks first).
  void complete() {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return started; });
      if (error) {
        std::rethrow_exception(error);
      }
    }
    std::call_once(completion, [&] {
      try {
        if (transfer) {
          transfer->wait();
        }
      } catch (const std::exception& e) {
        fail(e.what());
      }
    });
    std::lock_guard<std::mutex> lock(mu);
    if (error) {
      std::rethrow_exception(error);
    }
  }

  bool transfer_done() {
    std::lock_guard<std::mutex> lock(mu);
    return started && (error || !transfer || transfer->isCompleted());
  }
};

// Owned by the launch record that starts an operation: if the record is
// dropped without running (an earlier failure left its inputs undefined, a
// capture was abandoned), the operation gives its turn up and anyone waiting
// for it hears why, instead of waiting for ever.
struct StartingRecord {
  std::shared_ptr<Operation> op;
  bool ran = false;
  void give_up_turn() {
    if (ran) return;
    ran = true;
    op->order->done(op->ticket);
    op->fail("it was never started (an earlier failure on its stream left its tensors undefined)");
  }
  ~StartingRecord() { give_up_turn(); }
};

void run_start(LaunchRecord& record) {
  auto* starting = static_cast<StartingRecord*>(const_cast<void*>(record.payload));
  starting->ran = true;
  Operation& op = *starting->op;
  op.start();
  if (!op.call.point_to_point) {
    op.complete();
  }
}

void run_completion(LaunchRecord& record) {
  static_cast<Operation*>(const_cast<void*>(record.payload))->complete();
}

// Skipped (its inputs are undefined): the next operations' turns come now.
void skip_start(LaunchRecord& record) {
  static_cast<StartingRecord*>(const_cast<void*>(record.payload))->give_up_turn();
}

// No values are computed (phantom execution): the operation takes its turn and
// is done, having moved nothing.
void settle_start(LaunchRecord& record) {
  auto* starting = static_cast<StartingRecord*>(const_cast<void*>(record.payload));
  starting->ran = true;
  Operation& op = *starting->op;
  op.order->wait_for_turn(op.ticket);
  op.order->done(op.ticket);
  std::lock_guard<std::mutex> lock(op.mu);
  op.started = true;
  op.cv.notify_all();
}

const KernelDef kStart{"simccl", nullptr, &run_start, &skip_start, &settle_start};
const KernelDef kLocalStart{"simccl", nullptr, &run_start, &skip_start, &settle_start, {}, /*runs_locally=*/true};
const KernelDef kCompletion{"simccl_wait", nullptr, &run_completion, nullptr, &run_completion};

c10::Device device_of_call(const CollectiveCall& call) {
  if (call.device) {
    return *call.device;
  }
  for (const auto* list : {&call.inputs, &call.outputs}) {
    if (!list->empty()) {
      return list->front().device();
    }
  }
  TORCH_CHECK(false, "simccl ", call.name, ": no tensors");
}

void keep_tensors(LaunchRecord& record, const std::vector<at::Tensor>& tensors, bool written) {
  for (const auto& t : tensors) {
    record.keep_alive.push_back(t.storage());
    if (written) {
      record.mark_written(static_cast<int64_t>(record.keep_alive.size()) - 1);
    }
  }
}

class CollectiveWork final : public c10d::Work {
 public:
  CollectiveWork(int rank, std::shared_ptr<Operation> op, c10::Stream stream, void* end_event,
                 c10::intrusive_ptr<c10::ivalue::Future> future)
      : Work(rank, op->call.type, nullptr, std::nullopt),
        op_(std::move(op)),
        stream_(stream),
        end_event_(end_event),
        future_(std::move(future)) {}

  ~CollectiveWork() override { destroy_event(end_event_); }

  bool isCompleted() override {
    return op_->call.point_to_point ? op_->transfer_done() : query_event(end_event_);
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(op_->mu);
    return !op_->error;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(op_->mu);
    return op_->error;
  }
  std::vector<at::Tensor> result() override { return op_->call.outputs; }

  // The host waits: for the collective, or (point to point) for the transfer.
  void synchronize() override { wait_on_host(::kNoTimeout); }

  // Makes the caller's current stream wait; the host waits only for a barrier,
  // or when given a timeout (and then raises if it passes). A failure is not
  // raised here, even when it is already known: like any kernel's, it is reported
  // at the next synchronising call, whether the peer failed before or after this.
  // Then the inputs are let go, as ProcessGroupNCCL releases the tensors it stashed for the
  // allocator's safety once the caller's stream is ordered after the
  // collective: an input the program dropped is freed here, on its allocation
  // stream, which the collective is ordered before only if it is the caller's.
  bool wait(std::chrono::milliseconds timeout) override {
    if (op_->call.blocks_host || timeout != ::kNoTimeout) {
      wait_on_host(timeout);
    } else if (op_->call.point_to_point) {
      launch_completion(current_stream(stream_.device_index()));
    } else {
      block_on_event(end_event_, current_stream(stream_.device_index()));
    }
    op_->release_inputs();
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    TORCH_CHECK(future_, "simccl ", op_->call.name,
                ": get_future() is not available for point-to-point operations; call wait() instead");
    return future_;
  }

 private:
  void raise_if_failed() const {
    std::lock_guard<std::mutex> lock(op_->mu);
    if (op_->error) {
      std::rethrow_exception(op_->error);
    }
  }

  void launch_completion(const c10::Stream& stream) {
    block_on_event(end_event_, stream);  // the transfer has started (see launch_collective)
    const LaunchSite site = capture_launch_site();
    if (observers::watched()) {
      LaunchWork marker = collective_work(op_->call);  // the transfer's work is the start record's
      marker.work = simhpu::Work::Marker;
      marker.completes = true;
      describe_next_launch(marker);
    }
    LaunchSlot slot(stream);
    LaunchRecord& record = slot.record();
    record.kernel = &kCompletion;
    record.op_name = op_->call.name;
    record.site = site;
    record.payload = op_.get();
    record.payload_owner = op_;
    keep_tensors(record, op_->call.outputs, /*written=*/true);
    slot.commit();
  }

  void wait_on_host(std::chrono::milliseconds timeout) {
    const GilRelease no_gil;
    if (op_->call.point_to_point) {
      // complete() waits on the transport, which has a timeout of its own.
      op_->complete();
      return;
    }
    const bool reached = timeout == ::kNoTimeout ? (synchronize_event(end_event_), true)
                                               : synchronize_event_for(end_event_, timeout);
    TORCH_CHECK(reached, "simccl ", op_->call.name, " on ", op_->rank, ": not complete after ", timeout.count(),
                " ms (a peer has not reached it yet)");
    raise_if_failed();
  }

  std::shared_ptr<Operation> op_;
  c10::Stream stream_;
  void* end_event_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

} // namespace

namespace {

double total_bytes(const std::vector<at::Tensor>& tensors) {
  double bytes = 0;
  for (const at::Tensor& t : tensors) bytes += static_cast<double>(t.nbytes());
  return bytes;
}

// What a collective does, as a fabric model prices it: its kind, and the bytes
// it counts for that kind (the gathered whole for a gather, the
// input for a reduce-scatter, the buffer otherwise).
LaunchWork collective_work(const CollectiveCall& call) {
  using c10d::OpType;
  using Kind = CollectiveKind;
  LaunchWork cost;
  cost.work = simhpu::Work::Collective;
  cost.ranks = call.ranks;
  cost.first_rank = call.first_rank;
  cost.rank_stride = call.rank_stride;
  cost.group = call.group;
  cost.call_index = call.call_index;
  cost.members = call.members;
  cost.peer = call.peer;
  cost.sends = call.type == c10d::OpType::SEND;
  // (in-place collectives name their buffer as outputs only)
  cost.bytes = std::max(total_bytes(call.inputs), total_bytes(call.outputs));
  OpType type = call.type;
  if (type == OpType::COALESCED) {  // (c10d's type for the coalesced tensor forms: priced as what they do)
    const std::string_view name(call.name);
    if (name == "all_gather_into_tensor_coalesced") type = OpType::ALLGATHER_COALESCED;
    if (name == "reduce_scatter_tensor_coalesced") type = OpType::REDUCE_SCATTER_TENSOR_COALESCED;
  }
  switch (type) {
    case OpType::ALLREDUCE: case OpType::ALLREDUCE_COALESCED: case OpType::_ALLREDUCE_SPARSE:
      cost.collective = Kind::AllReduce; break;
    case OpType::ALLGATHER: case OpType::_ALLGATHER_BASE: case OpType::ALLGATHER_COALESCED: case OpType::GATHER:
      cost.collective = Kind::AllGather;
      cost.bytes = total_bytes(call.outputs);
      break;
    case OpType::REDUCE_SCATTER: case OpType::_REDUCE_SCATTER_BASE: case OpType::REDUCE_SCATTER_TENSOR_COALESCED:
    case OpType::SCATTER:
      cost.collective = Kind::ReduceScatter;
      cost.bytes = total_bytes(call.inputs);
      break;
    case OpType::BROADCAST: cost.collective = Kind::Broadcast; break;
    case OpType::REDUCE: cost.collective = Kind::Reduce; break;
    case OpType::ALLTOALL: case OpType::ALLTOALL_BASE: cost.collective = Kind::AllToAll; break;
    case OpType::BARRIER: cost.collective = Kind::Barrier; cost.bytes = 0; break;
    default:
      cost.collective = Kind::PointToPoint;
  }
  return cost;
}

} // namespace

c10::intrusive_ptr<c10d::Work> launch_collective(const std::shared_ptr<TransportOrder>& order, int rank,
                                                 const std::string& rank_description, CollectiveCall call) {
  const c10::Device device = device_of_call(call);
  const c10::Stream caller = current_stream(device.index());
  const c10::Stream comm = communication_stream(device.index(), order->channel());

  // The collective reads what the caller's stream has queued so far.
  void* inputs_ready = nullptr;
  record_event(&inputs_ready, caller);
  block_on_event(inputs_ready, comm);
  destroy_event(inputs_ready);

  auto op = std::make_shared<Operation>(std::move(call), order, rank_description);
  {
    const LaunchSite site = capture_launch_site();  // before the slot: it may take the GIL
    if (observers::watched()) describe_next_launch(collective_work(op->call));
    LaunchSlot slot(comm);
    op->ticket = order->take_ticket();
    LaunchRecord& record = slot.record();
    record.kernel = op->call.answers_locally ? &kLocalStart : &kStart;
    record.op_name = op->call.name;
    record.site = site;
    auto starting = std::make_shared<StartingRecord>();
    starting->op = op;
    record.payload = starting.get();
    record.payload_owner = std::move(starting);
    keep_tensors(record, op->call.inputs, /*written=*/false);
    keep_tensors(record, op->call.outputs, /*written=*/!op->call.point_to_point);
    if (op->call.outputs.empty()) {
      record.mark_writes_nothing();  // a send: it only reads
    }
    slot.commit();
  }

  // A collective: the point its communication stream passes once it is done.
  // Point to point: once it has started (the transfer completes on the host);
  // its completion record waits for that, so what the transfer writes is
  // ordered before what the completion makes the caller's stream wait for.
  void* end_event = nullptr;
  record_event(&end_event, comm);
  c10::intrusive_ptr<c10::ivalue::Future> future;
  if (!op->call.point_to_point) {
    // A future whose value is ready, to a stream that waits for it, once the
    // communication stream has passed here (what DDP's reducer waits on).
    future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                      std::vector<c10::Device>{device});
    const c10::StreamGuard on_comm(comm);
    future->markCompleted(c10::IValue(op->call.outputs));
  }
  return c10::make_intrusive<CollectiveWork>(rank, std::move(op), comm, end_event, std::move(future));
}

} // namespace simhpu
