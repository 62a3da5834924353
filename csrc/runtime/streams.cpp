#include "runtime/streams.h"

#include "runtime/capture.h"
#include "runtime/device.h"
#include "runtime/env_flags.h"
#include "runtime/fork_guard.h"
#include "runtime/host_openmp.h"
#include "runtime/launch_queue.h"
#include "runtime/observers.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>

namespace simhpu {
namespace {

// The default stream, the pool, and the communication streams.
constexpr int kStreamsPerDevice = 1 + kPooledStreams + kCommunicationStreams;
constexpr c10::StreamId kFirstCommunicationStreamId = 1 + kPooledStreams;

// Queues live for the whole process: workers may still be draining while
// static destructors run, so they are deliberately never destroyed.
struct DeviceStreams {
  c10::DeviceIndex device = 0;
  std::array<std::atomic<LaunchQueue*>, kStreamsPerDevice> queues{};
  std::atomic<uint32_t> next_pooled{0};
  std::mutex create_mu;

  LaunchQueue& queue(c10::StreamId id) {
    LaunchQueue* q = queues[id].load(std::memory_order_acquire);
    if (q == nullptr) {
      std::lock_guard<std::mutex> lock(create_mu);
      q = queues[id].load();
      if (q == nullptr) {
        q = new LaunchQueue(c10::Stream(c10::Stream::UNSAFE, device_of(device), id));
        queues[id].store(q, std::memory_order_release);
      }
    }
    return *q;
  }
};

DeviceStreams& streams_of(c10::DeviceIndex device) {
  static std::array<DeviceStreams, 64>* all = [] {
    auto* streams = new std::array<DeviceStreams, 64>();
    for (size_t d = 0; d < streams->size(); ++d) {
      (*streams)[d].device = static_cast<c10::DeviceIndex>(d);
    }
    return streams;
  }();
  return (*all)[device];
}

thread_local std::array<c10::StreamId, 64> tls_current_stream{};

c10::StreamId checked_id(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "expected a simhpu stream, got ", stream);
  check_device_index(stream.device_index(), "stream");
  TORCH_CHECK(stream.id() >= 0 && stream.id() < kStreamsPerDevice, "unknown simhpu stream id ", stream.id());
  return stream.id();
}

LaunchQueue& queue_of(const c10::Stream& stream) {
  return streams_of(stream.device_index()).queue(checked_id(stream));
}

} // namespace

bool launch_blocking() {
  static const bool blocking = env_flag("SIMHPU_LAUNCH_BLOCKING");
  return blocking;
}

c10::Stream current_stream(c10::DeviceIndex device) {
  return c10::Stream(c10::Stream::UNSAFE, device_of(device), tls_current_stream[device]);
}

void set_current_stream(const c10::Stream& stream) {
  tls_current_stream[stream.device_index()] = checked_id(stream);
}

c10::Stream default_stream(c10::DeviceIndex device) {
  return c10::Stream(c10::Stream::UNSAFE, device_of(device), 0);
}

c10::Stream pooled_stream(c10::DeviceIndex device) {
  check_device_index(device, "Stream");
  const uint32_t n = streams_of(device).next_pooled.fetch_add(1);
  return c10::Stream(c10::Stream::UNSAFE, device_of(device), 1 + static_cast<c10::StreamId>(n % kPooledStreams));
}

c10::Stream communication_stream(c10::DeviceIndex device, int channel) {
  check_device_index(device, "communication stream");
  const int slot = ((channel % kCommunicationStreams) + kCommunicationStreams) % kCommunicationStreams;
  return c10::Stream(c10::Stream::UNSAFE, device_of(device), kFirstCommunicationStreamId + slot);
}

namespace {
// Launch slots this thread holds: observers' own launches (before_launch)
// are made only outside them, as a slot holds its queue's producer lock.
thread_local int open_slots = 0;
} // namespace

LaunchSlot::LaunchSlot(const c10::Stream& stream) : stream_(stream) {
  check_not_forked();
  if (open_slots == 0) {
    observers::before_launch();
  }
  record_ = captured_record_for(stream);
  captured_ = record_ != nullptr;
  if (!captured_) {
    claim_from_queue(stream);
  }
  ++open_slots;
}

LaunchSlot::LaunchSlot(const c10::Stream& stream, BypassCapture) : stream_(stream) {
  check_not_forked();
  if (open_slots == 0) {
    observers::before_launch();
  }
  claim_from_queue(stream);
  ++open_slots;
}

void LaunchSlot::claim_from_queue(const c10::Stream& stream) {
  release_idle_host_openmp_team_now_and_then(1);
  // (Inline too while values are not computed: nothing runs, so nothing to queue.)
  if (launch_blocking() || !observers::values_computed()) {
    thread_local LaunchRecord inline_record;
    record_ = &inline_record;
  } else {
    queue_ = &queue_of(stream);
    record_ = &queue_->claim();
  }
}

void LaunchSlot::commit() {
  check_kernel_writes(*record_);  // (may raise: the slot is then dropped)
  // A launch collected into a cluster runs in the order it was made (a graph's
  // captured launches: when it is replayed, which the replay's launch covers).
  observers::on_launch(*record_, stream_, captured_ && capturing_graph());  // (may raise: the slot is then dropped)
  committed_ = true;
  if (captured_) {
    return;
  }
  observers::on_queued(*record_, stream_);
  if (queue_ != nullptr) {
    queue_->publish(*record_);
    return;
  }
  std::optional<std::string> error = run_record(*record_);
  record_->clear();
  TORCH_CHECK(!error, *error);
}

LaunchSlot::~LaunchSlot() {
  --open_slots;
  if (committed_) {
    return;
  }
  if (captured_) {
    drop_captured_record();
  } else if (queue_ != nullptr) {
    queue_->abandon(*record_);
  } else {
    record_->clear();
  }
}

namespace {
std::atomic<uint64_t> device_wide_wait_count{0};
} // namespace

uint64_t device_wide_waits() {
  return device_wide_wait_count.load(std::memory_order_relaxed);
}

void drain_launches(c10::DeviceIndex device) {
  if (on_launch_worker()) {
    return;  // a kernel allocating: its own queue cannot drain under it
  }
  device_wide_wait_count.fetch_add(1, std::memory_order_relaxed);
  if (!capturing_graph()) {
    before_host_wait(device, "drain");  // a cluster launches what it holds, which may free memory
  }
  for (auto& q : streams_of(device).queues) {
    if (LaunchQueue* queue = q.load()) {
      queue->drain();
    }
  }
}

void synchronize_stream(const c10::Stream& stream) {
  check_not_forked();
  before_host_wait(stream.device_index(), "synchronizing");
  observers::on_host_wait_begins();
  {
    // (Published when the stream reports a failure too: the wait happened.)
    struct Waited {
      const c10::Stream& stream;
      ~Waited() { observers::on_host_waited_for_stream(stream); }
    } waited{stream};
    queue_of(stream).synchronize();
  }
  observers::after_host_wait();
}

void hold_until_streams_pass(c10::DeviceIndex device, const c10::Storage& memory) {
  if (launch_blocking()) return;  // everything launched has run
  for (auto& q : streams_of(device).queues) {
    LaunchQueue* queue = q.load();
    if (queue == nullptr || queue->idle()) continue;
    LaunchSlot slot(queue->stream(), LaunchSlot::kBypassCapture);
    slot.record().kind = LaunchRecord::Kind::Hold;
    slot.record().op_name = "simhpu: hold memory until the stream passes";
    slot.record().keep_alive.push_back(memory);
    slot.commit();
  }
}

bool query_stream(const c10::Stream& stream) {
  if (!capturing_graph()) {
    before_host_wait(stream.device_index(), "query");
  }
  return queue_of(stream).idle();
}

void synchronize_device(c10::DeviceIndex device) {
  check_device_index(device, "synchronize");
  check_not_forked();
  device_wide_wait_count.fetch_add(1, std::memory_order_relaxed);
  before_host_wait(device, "synchronizing");
  // Every stream is waited for before any failure is reported, and every
  // stream's failure is reported together: a device synchronisation that raised
  // on the first stream would leave the others running, and their failures
  // (often kernels skipped because of the one reported) for a later call.
  auto& streams = streams_of(device);
  observers::on_host_wait_begins();
  for (auto& q : streams.queues) {
    if (LaunchQueue* queue = q.load()) {
      queue->drain();
    }
  }
  observers::on_host_waited_for_device(device);
  std::string failures;
  for (auto& q : streams.queues) {
    if (LaunchQueue* queue = q.load()) {
      if (std::optional<std::string> failure = queue->take_failure()) {
        failures += (failures.empty() ? "" : "\n") + *failure;
      }
    }
  }
  TORCH_CHECK(failures.empty(), failures);
  observers::after_host_wait();
}

void synchronize_all_devices() {
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    synchronize_device(i);
  }
}

} // namespace simhpu
