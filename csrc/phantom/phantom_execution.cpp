#include "phantom/phantom_execution.h"

#include "runtime/device_memory.h"
#include "runtime/kernel_arg.h"
#include "runtime/launch_record.h"
#include "runtime/launch_site.h"
#include "runtime/observers.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <ATen/ops/tensor.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string_view>
#include <map>
#include <mutex>
#include <unordered_set>
#include <utility>

namespace simhpu::phantom {

namespace {

struct State {
  std::mutex mu;
  std::atomic<bool> on{false};
  Values values = Values::Placeholder;
  std::vector<HostRead> reads;
  std::map<std::pair<std::string, int>, size_t> read_at;  // (file, line) -> index in reads
  int64_t known_bytes = kDefaultKnownBytes;
  // Device memory whose values are known, by its block's host address (a
  // storage's memory starts its block).
  std::unordered_set<const void*> known;
  int64_t known_launches = 0;
  int64_t peer_answers = 0;  // of those, collectives answered for simulated peers
  Routing routing;
  int64_t routed = 0;
};

bool is_router_histogram(const LaunchRecord& record) {
  return std::string_view(record.op_name).rfind("aten::histc", 0) == 0;
}

// The integer counts `routing` gives `total` tokens over `bins` experts: the
// largest remainders rounded up, so they add up to the total.
std::vector<double> routed_counts(const Routing& routing, int64_t total, int64_t bins) {
  std::vector<double> share(static_cast<size_t>(bins), 1.0);
  if (routing.kind == Routing::Kind::Zipf) {
    for (int64_t i = 0; i < bins; ++i) share[i] = 1.0 / std::pow(static_cast<double>(i + 1), routing.exponent);
  } else if (routing.kind == Routing::Kind::Histogram) {
    share = routing.weights;
  }
  double sum = 0;
  for (double w : share) sum += w;
  std::vector<double> counts(share.size());
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < share.size(); ++i) {
    const double exact = sum > 0 ? static_cast<double>(total) * share[i] / sum : 0.0;
    counts[i] = std::floor(exact);
    given += static_cast<int64_t>(counts[i]);
    remainders.emplace_back(exact - counts[i], i);
  }
  std::stable_sort(remainders.begin(), remainders.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < total && k < remainders.size(); ++k, ++given) counts[remainders[k].second] += 1;
  return counts;
}

const void* key_of(const c10::Storage& storage) {
  return host_address(storage.device().index(), storage.data());
}

State& state() {
  static State* s = new State();  // never destroyed: reads may come during exit
  return *s;
}

// f(the state), under its lock.
template <typename F>
auto locked(F&& f) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return f(s);
}

constexpr const char* kWhat = "phantom execution (torch.simhpu.simulate(execute=False) or SIMHPU_EXECUTE=0)";

class PhantomLens final : public RuntimeObserver {
 public:
  PhantomLens() { observers::subscribe(this); }

  bool computes_values() const override { return false; }

  std::string context_note() const override {
    return " (" + std::string(kWhat) + " was on: no kernel ran but those over values the host knew, and the device "
           "has the part's capacity)";
  }

  void on_allocate(const c10::Stream&, const void* host_address, size_t) override {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.known.insert(host_address);  // (fresh memory holds nothing a program may rely on)
  }

  bool knows_values(const at::Tensor& t) override {
    if (!t.defined() || !t.is_privateuseone() || !t.has_storage()) return true;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    // (within the limit: the host computes over them, and its pages of them are touched)
    return static_cast<int64_t>(t.storage().nbytes()) <= s.known_bytes && s.known.count(key_of(t.storage())) > 0;
  }

  void on_launch(LaunchRecord& record, const c10::Stream&, const LaunchWork*, bool) override {
    if (record.kind != LaunchRecord::Kind::Kernel || !is_router_histogram(record)) return;
    const DeviceTensor* out = histogram_output(record);
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    TORCH_CHECK(out == nullptr || s.routing.kind != Routing::Kind::Histogram ||
                    static_cast<int64_t>(s.routing.weights.size()) == out->numel(),
                record.op_name, ": SIMHPU_PHANTOM_ROUTING=", s.routing.setting, " gives a histogram of ",
                s.routing.weights.size(), " experts, but the router counts its tokens into ",
                out == nullptr ? 0 : out->numel(), " bins. Give a histogram of as many experts as the model has.");
  }

  bool computes_launch(const LaunchRecord& record) override {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (is_router_histogram(record) && give_routed_histogram(s, record)) return false;
    // (a kernel that does more than write memory - a collective, a graph's replay - is never run,
    // unless what it does beyond memory is local: a collective among simulated peers)
    bool run = (record.kernel->settle == nullptr || record.kernel->runs_locally) && !record.keep_alive.empty();
    int64_t bytes = 0;
    for (const c10::Storage& storage : record.keep_alive) {
      if (!storage || storage.device_type() != c10::DeviceType::PrivateUse1) continue;  // (host data: known)
      bytes += static_cast<int64_t>(storage.nbytes());
      if (s.known.count(key_of(storage)) == 0) run = false;
    }
    run = run && bytes <= s.known_bytes;
    for (size_t i = 0; i < record.keep_alive.size(); ++i) {
      const c10::Storage& storage = record.keep_alive[i];
      if (!storage || storage.device_type() != c10::DeviceType::PrivateUse1 || !record.may_write(i)) continue;
      if (run) {
        s.known.insert(key_of(storage));
      } else {
        s.known.erase(key_of(storage));
      }
    }
    if (run) ++s.known_launches;
    if (run && record.kernel->settle != nullptr) ++s.peer_answers;
    return run;
  }

  // A router's histogram over tokens nobody knows (its input unknown): the
  // routing distribution's counts of its input's elements, written where it
  // would write them, and known. False where the input is known (it runs).
  static bool give_routed_histogram(State& s, const LaunchRecord& record) {
    const DeviceTensor* in = nullptr;
    for (const KernelArg& arg : record.args) {
      if (const auto* t = std::get_if<DeviceTensor>(&arg); t != nullptr && t->dtype != c10::ScalarType::Undefined) {
        in = t;
        break;
      }
    }
    const DeviceTensor* out = histogram_output(record);
    if (in == nullptr || out == nullptr || out == in || in->storage_slot < 0) return false;
    if (s.known.count(key_of(record.keep_alive[in->storage_slot])) > 0) return false;
    const std::vector<double> counts = routed_counts(s.routing, in->numel(), out->numel());
    out->cpu_view().copy_(at::tensor(counts, at::TensorOptions().dtype(at::kDouble)).view(out->cpu_view().sizes()));
    s.known.insert(key_of(record.keep_alive[out->storage_slot]));
    ++s.routed;
    return true;
  }

  static const DeviceTensor* histogram_output(const LaunchRecord& record) {
    for (const KernelArg& arg : record.args) {
      const auto* t = std::get_if<DeviceTensor>(&arg);
      if (t != nullptr && t->storage_slot >= 0 && record.written_storages != 0 &&
          record.may_write(static_cast<size_t>(t->storage_slot))) {
        return t;
      }
    }
    return nullptr;
  }

  void on_host_read(const at::Tensor& device_source, const at::Tensor& host_destination, const char* op) override {
    if (knows_values(device_source)) {  // (the truth, not a placeholder: nothing to count)
      host_destination.copy_(describe_tensor(device_source).cpu_view());
      return;
    }
    const LaunchSite site = capture_launch_site();  // before the lock: it may take the GIL
    const char* file = site.file();
    const int line = site.line();
    State& s = state();
    {
      std::lock_guard<std::mutex> lock(s.mu);
      const std::pair<std::string, int> key{file != nullptr ? file : "", line};
      auto [it, fresh] = s.read_at.emplace(key, s.reads.size());
      if (fresh) s.reads.push_back(HostRead{op, key.first, line, 0, 0});
      HostRead& read = s.reads[it->second];
      read.count += 1;
      read.bytes += static_cast<int64_t>(device_source.nbytes());
      if (s.values == Values::Error) {
        TORCH_CHECK(false, op, " read the values of a device tensor of shape ", device_source.sizes(), " (",
                    c10::toString(device_source.scalar_type()), ")", file != nullptr ? " at " : "",
                    file != nullptr ? file : "", file != nullptr ? ":" + std::to_string(line) : "", ", but ", kWhat,
                    " computes no values (values=\"error\"). Pass values=\"placeholder\" to read placeholders, "
                    "or keep host reads out of the simulated steps.");
      }
    }
    // Ones for floating point, which scales and normalises (no division by
    // zero); zeros for integers (counts, offsets, RNG states: a zero offset is
    // valid) and False for flags: a loop that runs while any element is flagged
    // (rejection sampling: nn.init.trunc_normal_) ends.
    const c10::ScalarType t = host_destination.scalar_type();
    host_destination.fill_(c10::isIntegralType(t, /*includeBool=*/true) ? 0 : 1);
  }

  void before_host_compute(const char* op) override {
    TORCH_CHECK(false, op, " needs its inputs' values on the host (what it returns, or its result's shape, ",
                "depends on them), but ", kWhat,
                " computes no values. Run this part with execute=True, or give the operator what it "
                "would learn from the values (a size, a count) ahead of time.");
  }
};

PhantomLens& lens() {
  static PhantomLens* instance = new PhantomLens();
  return *instance;
}
const bool lens_subscribed = (lens(), true);

} // namespace

void set_enabled(bool on, Values values, int64_t known_bytes) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.values = values;
    s.known_bytes = known_bytes;
    s.known.clear();  // (what was computed before is not tracked: unknown)
  }
  s.on.store(on);
  observers::set_active(&lens(), on);
}

bool enabled() {
  return state().on.load();
}

std::vector<HostRead> host_reads() {
  return locked([](State& s) { return s.reads; });
}

void clear_host_reads() {
  locked([](State& s) {
    s.reads.clear();
    s.read_at.clear();
    s.known_launches = 0;
    s.peer_answers = 0;
    s.routed = 0;
  });
}

void forget_values(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone() || !t.has_storage()) return;
  locked([&](State& s) { s.known.erase(key_of(t.storage())); });
}

void set_routing(Routing routing) {
  locked([&](State& s) { s.routing = std::move(routing); });
}

int64_t routed_histograms() {
  return locked([](State& s) { return s.routed; });
}

int64_t known_launches() {
  return locked([](State& s) { return s.known_launches; });
}

int64_t peer_answers() {
  return locked([](State& s) { return s.peer_answers; });
}

} // namespace simhpu::phantom
