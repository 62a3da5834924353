#include "runtime/launch_queue.h"

#include "runtime/device.h"

#include <c10/util/Exception.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace simhpu {
namespace {

std::string describe_failure(const LaunchRecord& record, const char* what) {
  return std::string("simhpu kernel '") + record.kernel->name + "' launched by " +
      record.op_name + " failed: " + what;
}

// Runs a record's kernel and turns any exception into a message.
std::optional<std::string> run_record(LaunchRecord& record) {
  try {
    record.kernel->run(record.args);
    return std::nullopt;
  } catch (const c10::Error& e) {
    return describe_failure(record, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return describe_failure(record, e.what());
  }
}

class LaunchQueue {
 public:
  void push(LaunchRecord&& record) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!worker_.joinable()) {
        worker_ = std::thread([this] { work(); });
      }
      pending_.push_back(std::move(record));
    }
    work_ready_.notify_one();
  }

  void synchronize() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return pending_.empty() && !busy_; });
    if (failure_) {
      std::string message = std::move(*failure_);
      failure_.reset();
      TORCH_CHECK(false, message);
    }
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_ready_.wait(lock, [this] { return !pending_.empty(); });
      LaunchRecord record = std::move(pending_.front());
      pending_.pop_front();
      busy_ = true;
      // After a failure the stream is poisoned: later kernels may depend on the
      // failed one's output, so they are dropped until the error is reported.
      const bool poisoned = failure_.has_value();
      lock.unlock();
      std::optional<std::string> error;
      if (!poisoned) {
        error = run_record(record);
      }
      record = LaunchRecord();  // release storages outside the lock
      lock.lock();
      if (error && !failure_) {
        failure_ = std::move(error);
      }
      busy_ = false;
      if (pending_.empty()) {
        idle_.notify_all();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<LaunchRecord> pending_;
  bool busy_ = false;
  std::optional<std::string> failure_;
  std::thread worker_;
};

// Queues live for the whole process: worker threads may still be draining
// while static destructors run, so the queues are deliberately never destroyed.
LaunchQueue& queue_for(c10::DeviceIndex device) {
  static std::vector<LaunchQueue*>* queues = [] {
    auto* v = new std::vector<LaunchQueue*>();
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      v->push_back(new LaunchQueue());
    }
    return v;
  }();
  return *(*queues)[device];
}

bool read_launch_blocking() {
  const char* env = std::getenv("SIMHPU_LAUNCH_BLOCKING");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

} // namespace

bool launch_blocking() {
  static const bool blocking = read_launch_blocking();
  return blocking;
}

void submit(c10::DeviceIndex device, LaunchRecord&& record) {
  if (launch_blocking()) {
    std::optional<std::string> error = run_record(record);
    TORCH_CHECK(!error, *error);
    return;
  }
  queue_for(device).push(std::move(record));
}

void synchronize_device(c10::DeviceIndex device) {
  check_device_index(device, "synchronize");
  queue_for(device).synchronize();
}

void synchronize_all_devices() {
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    queue_for(i).synchronize();
  }
}

} // namespace simhpu
