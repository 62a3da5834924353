#include "runtime/capture.h"

#include "runtime/device.h"
#include "runtime/generator.h"
#include "runtime/host_openmp.h"
#include "runtime/launch_site.h"
#include "runtime/streams.h"
#include "runtime/undefined_memory.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

namespace simhpu {
namespace {

struct ThreadCapture {
  CaptureKind kind;
  c10::Stream stream;
  std::shared_ptr<LaunchSequence> sequence;
  std::string invalidated;  // a graph capture that saw something it cannot capture
  std::unordered_set<const void*> allocated = {};  // blocks allocated meanwhile on this thread
};

// At most one capture per thread; a nested graph or cluster joins it.
thread_local std::optional<ThreadCapture> tls_capture;

std::string describe(const c10::Stream& stream) {
  return "stream " + std::to_string(stream.id()) + " of simhpu:" + std::to_string(stream.device_index());
}

// Runs a sequence's records in order. Each failure marks what its kernel
// writes undefined (run_record), so later records that read it are skipped and
// independent ones still run, as they would have from the queue; the first
// failure is the sequence's.
void run_sequence(LaunchRecord& record) {
  auto* sequence = static_cast<LaunchSequence*>(const_cast<void*>(record.payload));
  for (const void* block : sequence->owned_blocks) {
    forget_undefined(block);
  }
  std::optional<std::string> first_failure;
  for (LaunchRecord& captured : sequence->records) {
    std::optional<std::string> failure = run_record(captured);
    if (failure && !first_failure) {
      first_failure = std::move(failure);
    }
  }
  if (first_failure) {
    throw std::runtime_error(*first_failure);
  }
}

// What a graph replay runs: the graph's records, and the seeds this replay's random kernels draw from.
struct GraphReplay {
  std::shared_ptr<const LaunchSequence> sequence;
  std::vector<uint64_t> seeds;  // one per sequence->random_draws
};

void run_graph_replay(LaunchRecord& record) {
  const auto* replay = static_cast<const GraphReplay*>(record.payload_owner.get());
  const std::vector<CapturedRandomDraw>& draws = replay->sequence->random_draws;
  for (size_t i = 0; i < draws.size(); ++i) {
    at::Generator engine = draws[i].kernel_engine;  // shares the engine: a handle, not a copy
    std::lock_guard<std::mutex> lock(engine.mutex());
    engine.set_current_seed(replay->seeds[i]);
  }
  run_sequence(record);
}

const KernelDef kGraphReplay{"graph_replay", nullptr, &run_graph_replay, nullptr, &run_graph_replay};
const KernelDef kCluster{"cluster", nullptr, &run_sequence, nullptr, &run_sequence};

// Launches what the current cluster collected, and starts it afresh.
void flush_cluster(ThreadCapture& capture) {
  if (capture.sequence->records.empty()) {
    return;
  }
  std::shared_ptr<LaunchSequence> collected = std::move(capture.sequence);
  capture.sequence = std::make_shared<LaunchSequence>();
  launch_sequence(capture.stream, std::move(collected), CaptureKind::Cluster);
}

// Begins this thread's capture (the caller checked it has none).
void begin_capture(ThreadCapture capture) {
  tls_capture = std::move(capture);
  threads_capturing.fetch_add(1, std::memory_order_relaxed);
}

ThreadCapture end_capture() {
  ThreadCapture capture = std::move(*tls_capture);
  tls_capture.reset();
  threads_capturing.fetch_sub(1, std::memory_order_relaxed);
  return capture;
}

} // namespace

std::atomic<int> threads_capturing{0};

const LaunchSequence* graph_replayed_by(const LaunchRecord& record) {
  return record.kernel == &kGraphReplay ? static_cast<const LaunchSequence*>(record.payload) : nullptr;
}

bool cluster_launched_by(const LaunchRecord& record) {
  return record.kernel == &kCluster;
}

size_t LaunchSequence::kernel_count() const {
  size_t n = 0;
  for (const LaunchRecord& r : records) {
    n += r.kind == LaunchRecord::Kind::Kernel ? 1 : 0;
  }
  return n;
}

LaunchRecord* captured_record_for_this_thread(const c10::Stream& stream) {
  if (!tls_capture) {
    return nullptr;
  }
  ThreadCapture& capture = *tls_capture;
  if (stream == capture.stream) {
    return &capture.sequence->records.emplace_back();
  }
  if (capture.kind == CaptureKind::Graph) {
    std::string problem = "a launch on " + describe(stream) + " while " + describe(capture.stream) +
                          " is being captured into a torch.simhpu.Graph: only work on the capturing stream can be "
                          "captured (launch it on that stream, or outside the capture)";
    capture.invalidated = problem;
    TORCH_CHECK(false, "simhpu: ", problem);
  }
  // A cluster launches what it holds first, so work on the other stream
  // cannot overtake it (it may wait for an event the cluster records).
  flush_cluster(capture);
  return nullptr;
}

void drop_captured_record() {
  tls_capture->sequence->records.pop_back();
}

void before_host_wait(c10::DeviceIndex device, const char* what) {
  if (!tls_capture) {
    return;
  }
  ThreadCapture& capture = *tls_capture;
  if (capture.kind == CaptureKind::Cluster) {
    flush_cluster(capture);
    return;
  }
  if (device >= 0 && device != capture.stream.device_index()) {
    return;
  }
  std::string problem = std::string(what) + " while " + describe(capture.stream) +
                        " is being captured into a torch.simhpu.Graph: captured work has not run, so the host "
                        "cannot wait for it. Keep .item(), .cpu(), printing tensors and operators whose output "
                        "size depends on the data (nonzero, unique, masked_select) out of the captured region";
  capture.invalidated = problem;
  TORCH_CHECK(false, "simhpu: ", problem);
}

void launch_sequence(const c10::Stream& stream, std::shared_ptr<const LaunchSequence> sequence, CaptureKind kind) {
  const bool cluster = kind == CaptureKind::Cluster;
  // The launch below counts once more; the sequence's kernels are what it hands over.
  release_idle_host_openmp_team_now_and_then(sequence->records.size());
  const LaunchSite site = capture_launch_site();  // before the slot: it may take the GIL
  // A cluster being flushed goes to the queue; a replay joins any capture.
  LaunchSlot slot = cluster ? LaunchSlot(stream, LaunchSlot::kBypassCapture) : LaunchSlot(stream);
  LaunchRecord& record = slot.record();
  record.kernel = cluster ? &kCluster : &kGraphReplay;
  record.op_name = cluster ? "compiled graph" : "Graph.replay";
  record.site = site;
  record.payload = sequence.get();
  if (cluster) {
    record.payload_owner = std::move(sequence);
  } else {
    // The seeds are taken now, in launch order on the host, as every other launch takes them.
    auto replay = std::make_shared<GraphReplay>();
    for (const CapturedRandomDraw& draw : sequence->random_draws) {
      replay->seeds.push_back(take_launch_seed(draw.device_generator, draw.numbers));
    }
    replay->sequence = std::move(sequence);
    record.payload_owner = std::move(replay);
  }
  slot.commit();
}

void begin_graph_capture() {
  const c10::Stream stream = current_stream(current_device());
  TORCH_CHECK(!tls_capture || tls_capture->kind != CaptureKind::Graph,
              "simhpu: Graph.capture_begin: this thread is already capturing ", describe(tls_capture->stream),
              " into a graph; end that capture first");
  TORCH_CHECK(!tls_capture, "simhpu: Graph.capture_begin: cannot begin a graph capture inside a compiled graph's call");
  begin_capture(ThreadCapture{CaptureKind::Graph, stream, std::make_shared<LaunchSequence>(), {}});
}

void note_allocation_for_capture(const void* block) {
  if (tls_capture && tls_capture->kind == CaptureKind::Graph) {
    tls_capture->allocated.insert(block);
  }
}

std::shared_ptr<const LaunchSequence> end_graph_capture() {
  TORCH_CHECK(tls_capture && tls_capture->kind == CaptureKind::Graph,
              "simhpu: Graph.capture_end: this thread is not capturing a graph (call capture_begin first)");
  ThreadCapture capture = end_capture();
  TORCH_CHECK(capture.invalidated.empty(), "simhpu: Graph.capture_end: the capture failed: ", capture.invalidated);
  // Only blocks the records hold: those live as long as the graph, so their
  // addresses cannot come to name another tensor's memory.
  std::unordered_set<const void*> owned;
  for (const LaunchRecord& r : capture.sequence->records) {
    for (const c10::Storage& storage : r.keep_alive) {
      if (storage && capture.allocated.count(storage.data()) != 0) owned.insert(storage.data());
    }
  }
  capture.sequence->owned_blocks.assign(owned.begin(), owned.end());
  return capture.sequence;
}

bool capturing_graph() {
  return tls_capture && tls_capture->kind == CaptureKind::Graph;
}

bool capture_random_draw(CapturedRandomDraw draw) {
  if (!capturing_graph()) return false;
  tls_capture->sequence->random_draws.push_back(std::move(draw));
  return true;
}

bool begin_cluster(c10::DeviceIndex device) {
  if (tls_capture || launch_blocking()) {
    return false;  // joins the enclosing capture; in blocking mode every launch runs at once
  }
  check_device_index(device, "compiled graph");
  begin_capture(ThreadCapture{CaptureKind::Cluster, current_stream(device), std::make_shared<LaunchSequence>(), {}});
  return true;
}

void end_cluster() {
  TORCH_CHECK(tls_capture && tls_capture->kind == CaptureKind::Cluster, "simhpu: end_cluster without begin_cluster");
  ThreadCapture capture = end_capture();
  flush_cluster(capture);
}

} // namespace simhpu
