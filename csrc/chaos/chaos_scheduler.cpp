#include "chaos/chaos_scheduler.h"

#include "runtime/observers.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace simhpu::chaos {
namespace detail {
std::atomic<bool> on{false};
} // namespace detail

namespace {

std::mutex mu;
uint64_t current_seed = 0;
std::atomic<uint64_t> generation{0};  // bumped by set_seed: workers reseed

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A worker's own draws: seeded from the seed and its stream, so each stream
// drifts on its own and a run's delays follow from the seed.
struct WorkerDraws {
  uint64_t generation = ~uint64_t(0);
  uint64_t state = 0;
  uint64_t launches = 0;  // drawn for since the seed was set
};
thread_local WorkerDraws worker;

constexpr size_t kDrawsKept = 100'000;
std::vector<Draw> draw_log;  // guarded by mu

// (Read while the library loads, where nothing may throw: a value that is not a
// seed leaves chaos off here, and torch_simhpu's import refuses it by name.)
std::optional<uint64_t> seed_from_environment() {
  const char* env = std::getenv("SIMHPU_CHAOS");
  if (env == nullptr || *env == '\0' || *env == '-') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(env, &end, 10);
  if (end == env || *end != '\0' || errno == ERANGE) return std::nullopt;
  return static_cast<uint64_t>(value);
}

// What the runtime shows the scheduler: each launch before its worker runs it.
class ChaosLens final : public RuntimeObserver {
 public:
  ChaosLens() { observers::subscribe(this); }
  void before_kernel(const c10::Stream& stream, bool after_idle) override { before_kernel_slow(stream, after_idle); }
  // The delays are the workers': a host thread running records itself would skip them.
  bool allows_host_runs() const override { return false; }
  std::string context_note() const override { return note(); }
};

ChaosLens& lens() {
  static ChaosLens* instance = new ChaosLens();
  return *instance;
}

const bool seeded_from_environment = (set_seed(seed_from_environment()), true);

} // namespace

std::optional<uint64_t> seed() {
  std::lock_guard<std::mutex> lock(mu);
  return enabled() ? std::optional<uint64_t>(current_seed) : std::nullopt;
}

void set_seed(std::optional<uint64_t> seed) {
  std::lock_guard<std::mutex> lock(mu);
  current_seed = seed.value_or(0);
  draw_log.clear();
  generation.fetch_add(1, std::memory_order_relaxed);
  detail::on.store(seed.has_value(), std::memory_order_relaxed);
  observers::set_active(&lens(), seed.has_value());
}

void before_kernel_slow(const c10::Stream& stream, bool after_idle) {
  const uint64_t now = generation.load(std::memory_order_relaxed);
  if (worker.generation != now) {
    std::lock_guard<std::mutex> lock(mu);
    worker.generation = now;
    worker.state = current_seed ^ (static_cast<uint64_t>(stream.device_index()) << 56) ^
                  (static_cast<uint64_t>(stream.id()) * 0x2545f4914f6cdd1dull);
    worker.launches = 0;
  }
  const uint64_t launch = worker.launches++;
  const uint64_t draw = splitmix(worker.state);
  const bool held = after_idle ? (draw & 1) != 0 : (draw & 15) == 0;
  const uint64_t longest_us = after_idle ? 10'000 : 1'000;
  const uint64_t microseconds = (draw >> 8) % longest_us;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (draw_log.size() < kDrawsKept) {
      draw_log.push_back({stream.device_index(), stream.id(), launch, after_idle, held, microseconds});
    }
  }
  if (held) {
    std::this_thread::sleep_for(std::chrono::microseconds(microseconds));
  }
}

std::vector<Draw> draws() {
  std::lock_guard<std::mutex> lock(mu);
  return draw_log;
}

std::string note() {
  const std::optional<uint64_t> s = seed();
  return s ? " (chaos scheduling was on: SIMHPU_CHAOS=" + std::to_string(*s) +
                 " draws the same holds for each stream's launches again; torch.simhpu.chaos.draws() lists them)"
           : std::string();
}

} // namespace simhpu::chaos
