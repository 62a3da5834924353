#include "runtime/launch_record.h"

#include "runtime/observers.h"
#include "runtime/undefined_memory.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <set>

namespace simhpu {
namespace {

// What a failed or skipped kernel may have written is undefined from now on.
void mark_written_undefined(const LaunchRecord& record, const FailureMessage& failure) {
  for (size_t i = 0; i < record.keep_alive.size(); ++i) {
    if (record.may_write(i)) {
      mark_undefined(record.keep_alive[i], failure);
    }
  }
}

// The failure that left memory this kernel takes undefined, or null.
FailureMessage undefined_input(const LaunchRecord& record) {
  if (!any_undefined()) {
    return nullptr;
  }
  for (const c10::Storage& storage : record.keep_alive) {
    if (FailureMessage failure = undefined_by(storage)) {
      return failure;
    }
  }
  return nullptr;
}

} // namespace

const char* intern_name(const std::string& name) {
  static std::mutex mu;
  static auto* names = new std::set<std::string>();  // never destroyed: workers may read names at exit
  std::lock_guard<std::mutex> lock(mu);
  return names->insert(name).first->c_str();
}

// "simhpu kernel 'K' launched by OP at FILE:LINE", for messages about a record.
std::string describe_kernel(const LaunchRecord& record) {
  std::string text = std::string("simhpu kernel '") + record.kernel->name + "' launched by " + record.op_name;
  if (record.site.known()) {
    text += std::string(" at ") + record.site.file() + ":" + std::to_string(record.site.line());
  }
  return text;
}

namespace {

// The tensors one argument passes (none for a value or a None).
template <typename Fn>
void for_each_tensor(const KernelArg& arg, Fn&& fn) {
  if (const auto* tensor = std::get_if<DeviceTensor>(&arg)) {
    fn(*tensor);
  } else if (const auto* list = std::get_if<std::vector<DeviceTensor>>(&arg)) {
    for (const DeviceTensor& t : *list) {
      fn(t);
    }
  }
}

} // namespace

void check_kernel_writes(LaunchRecord& record) {
  if (record.kind != LaunchRecord::Kind::Kernel || record.kernel == nullptr) {
    return;
  }
  const KernelSignature& signature = record.kernel->signature;
  if (signature.params < 0) {
    return;
  }
  const char* kernel = record.kernel->name;
  TORCH_CHECK(record.args.size() == static_cast<size_t>(signature.params), record.op_name, ": kernel '", kernel,
              "' takes ", signature.params, " argument(s), the launch passes ", record.args.size());
  const bool marked = record.written_storages != 0;
  for (size_t i = 0; i < record.args.size() && i < 64; ++i) {
    const bool output = ((signature.outputs >> i) & 1) != 0;
    for_each_tensor(record.args[i], [&](const DeviceTensor& t) {
      // (Slot 63 and up share bits with mark_writes_nothing and the overflow: not told apart.)
      if (t.storage_slot < 0 || t.storage_slot >= 63) {
        return;
      }
      if (!marked) {
        if (output) record.mark_written(t.storage_slot);
        return;
      }
      const bool written = ((record.written_storages >> t.storage_slot) & 1) != 0;
      TORCH_CHECK(!written || output, record.op_name, ": argument ", i, " of kernel '", kernel,
                  "' is marked written(), but the kernel only reads its parameter ", i,
                  "; a parameter the kernel writes has type Out<DeviceTensor> (kernels/kernel_api.h)");
      TORCH_CHECK(written || !output, record.op_name, ": kernel '", kernel, "' writes its parameter ", i,
                  " (an Out<T>), but the launch passes argument ", i,
                  " as a tensor it only reads; mark it written(t), as every output of the launch");
    });
  }
}

// Runs one record; a kernel's exception becomes a message.
namespace {
thread_local int kernels_running = 0;
struct RunningKernel {
  RunningKernel() { ++kernels_running; }
  ~RunningKernel() { --kernels_running; }
};
} // namespace

bool running_kernel() {
  return kernels_running > 0;
}

std::optional<std::string> run_record(LaunchRecord& record) {
  switch (record.kind) {
    case LaunchRecord::Kind::RecordEvent: {
      std::lock_guard<std::mutex> lock(record.event->mu);
      record.event->reached = std::max(record.event->reached, record.event_version);
      record.event->reached_at = std::chrono::steady_clock::now();
      record.event->cv.notify_all();
      return std::nullopt;
    }
    case LaunchRecord::Kind::WaitEvent:
      record.event->wait_for(record.event_version);
      return std::nullopt;
    case LaunchRecord::Kind::Hold:
      return std::nullopt;
    case LaunchRecord::Kind::Kernel:
      break;
  }
  if (!observers::launch_computed(record)) {
    if (record.kernel->settle != nullptr) record.kernel->settle(record);
    return std::nullopt;
  }
  // A kernel that would read memory an earlier failure left undefined is not
  // run: its outputs become undefined too, for the same cause, and its stream
  // reports that at its next synchronisation (whichever thread reported the
  // original failure). Work independent of the failure runs as usual.
  if (FailureMessage cause = undefined_input(record)) {
    mark_written_undefined(record, cause);
    if (record.kernel->skipped != nullptr) record.kernel->skipped(record);
    return describe_kernel(record) + " was not run: it takes memory left undefined by an earlier failure: " + *cause;
  }
  std::optional<std::string> failure;
  try {
    const RunningKernel running;
    if (record.kernel->run_record != nullptr) {
      record.kernel->run_record(record);
    } else {
      record.kernel->run(record.args);
    }
    return std::nullopt;
  } catch (const c10::Error& e) {
    failure = describe_kernel(record) + " failed: " + e.what_without_backtrace();
  } catch (const std::exception& e) {
    failure = describe_kernel(record) + " failed: " + e.what();
  }
  mark_written_undefined(record, std::make_shared<const std::string>(*failure));
  return failure;
}

void LaunchRecord::clear() {
  // The fields on the slot's first cache line are written by every launch
  // anyway; past it, only what differs from an empty record is written: the
  // worker's core read the slot last, and each line written here must be taken
  // back from it.
  kind = Kind::Kernel;
  kernel = nullptr;
  op_name = "";
  queued_ns = -1;
  correlation = 0;
  keep_alive.clear();
  if (!args.empty()) {
    args.clear();
  }
  if (event) {
    event.reset();
    event_version = 0;
  }
  if (payload != nullptr) {
    payload = nullptr;
  }
  if (payload_owner) {
    payload_owner.reset();
  }
  if (written_storages != 0) {
    written_storages = 0;
  }
  if (site.code != nullptr || site.instruction != 0) {
    site = LaunchSite();
  }
}

} // namespace simhpu
