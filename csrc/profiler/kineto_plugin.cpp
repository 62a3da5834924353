// The device in PyTorch's profiler (torch.profiler.profile(activities=[CPU,
// PrivateUse1])): a Kineto activity profiler whose trace is the runtime's own
// (trace.h) — one kernel row per launch, on its device and stream, linked to the
// host op that launched it by the profiler's correlation id.
#ifndef USE_KINETO
#define USE_KINETO  // the torch wheel is built with Kineto; its plugin headers are behind this
#endif
#include "runtime/device.h"
#include "runtime/streams.h"
#include "trace/kernel_trace.h"

#include <libkineto.h>  // CpuTraceBuffer
#include <output_base.h>  // ActivityLogger
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <cstring>
#include <string>

namespace simhpu {
namespace {

using libkineto::ActivityType;

class KernelTraceSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    mark_ = start_trace();
    started_ = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  // Waits for the kernels launched so far, without taking their failures: those
  // stay for the program's next synchronising call.
  void stop() override {
    if (!started_) return;
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) drain_launches(d);
    entries_ = stop_trace(mark_);
    started_ = false;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return {};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked_activity,
                    int64_t, int64_t) override {
    for (const TraceEntry& e : entries_) {
      // "reference: aten::addmm.out": the reference kernel serves many ops, and rows are grouped by name.
      const std::string name = *e.op != '\0' && std::strcmp(e.op, e.kernel) != 0 ? std::string(e.kernel) + ": " + e.op
                                                                                  : std::string(e.kernel);
      libkineto::GenericTraceActivity kernel(span_, ActivityType::CONCURRENT_KERNEL, name);
      kernel.startTime = unix_ns_of(e.start_ns);
      kernel.endTime = unix_ns_of(e.end_ns);
      kernel.device = e.device;
      kernel.resource = static_cast<int32_t>(e.stream);
      kernel.id = static_cast<int32_t>(e.correlation);
      if (linked_activity && e.correlation != 0) kernel.linked = linked_activity(static_cast<int32_t>(e.correlation));
      kernel.flow.id = static_cast<uint32_t>(e.correlation);
      kernel.flow.type = libkineto::kLinkAsyncCpuGpu;
      kernel.flow.start = false;
      // Quoted: addMetadata would format through fmt, which torch does not export.
      kernel.addMetadataQuoted("device", "simhpu:" + std::to_string(e.device));
      kernel.addMetadataQuoted("stream", std::to_string(e.stream));
      kernel.addMetadataQuoted("op", e.op);
      kernel.addMetadataQuoted("queued (us)", std::to_string((e.start_ns - e.queued_ns) / 1000.0));
      kernel.addMetadataQuoted("ran (us)", std::to_string((e.end_ns - e.start_ns) / 1000.0));
      if (e.file != nullptr) kernel.addMetadataQuoted("launched at", std::string(e.file) + ":" + std::to_string(e.line));
      logger.handleGenericActivity(kernel);
    }
    entries_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "simhpu", "simhpu device"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return nullptr;
  }

  // Around each host op, on its thread: the launches it makes carry its id.
  void pushCorrelationId(uint64_t id) override {
    push_correlation(id);
  }
  void popCorrelationId() override {
    pop_correlation();
  }

 private:
  libkineto::TraceSpan span_{0, 0, "simhpu"};
  TraceMark mark_;
  bool started_ = false;
  std::vector<TraceEntry> entries_;
};

class SimhpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& activity_types,
                                                                  const libkineto::Config&) override {
    if (activity_types.count(ActivityType::CONCURRENT_KERNEL) == 0) return nullptr;
    return std::make_unique<KernelTraceSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                  const std::set<ActivityType>& activity_types,
                                                                  const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"simhpu"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL};
};

REGISTER_PRIVATEUSE1_PROFILER(SimhpuActivityProfiler);

} // namespace
} // namespace simhpu
