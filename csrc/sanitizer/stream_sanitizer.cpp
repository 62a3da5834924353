#include "sanitizer/stream_sanitizer.h"

#include "runtime/device.h"
#include "runtime/memory_history.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace simhpu::sanitizer {
namespace detail {
std::atomic<int> mode{static_cast<int>(Mode::Off)};
} // namespace detail

namespace {

using ActorId = uint32_t;
constexpr ActorId kHost = 0;

// Entry a: how far actor a's work is known to be complete (or ordered before).
struct Clock {
  std::vector<uint64_t> at;

  uint64_t get(ActorId a) const { return a < at.size() ? at[a] : 0; }
  void set(ActorId a, uint64_t v) {
    if (at.size() <= a) at.resize(a + 1, 0);
    at[a] = v;
  }
  void join(const Clock& other) {
    if (at.size() < other.at.size()) at.resize(other.at.size(), 0);
    for (size_t i = 0; i < other.at.size(); ++i) at[i] = std::max(at[i], other.at[i]);
  }
};

// Who touched memory, and where in the program.
struct Touch {
  ActorId actor = kHost;
  uint64_t epoch = 0;
  bool write = false;
  const char* op = "";
  LaunchSite site;
};

struct Access {
  uintptr_t begin = 0, end = 0;
  Touch touch;
};

// The history of one allocated block.
struct Block {
  size_t bytes = 0;
  LaunchSite allocated_at;
  std::vector<Access> accesses;
};

struct Actor {
  std::string name;  // "simhpu:0 stream 2", "the host"
  Clock clock;
};

struct State {
  std::mutex mu;
  std::vector<Actor> actors{{"the host", {}}};
  std::map<std::pair<int, int64_t>, ActorId> stream_actors;
  std::unordered_map<const void*, Clock> event_clocks;
  std::map<uintptr_t, Block> blocks;  // by host address of the block's start
  std::vector<std::string> reports;

  ActorId actor_of(const c10::Stream& stream) {
    const auto key = std::make_pair(static_cast<int>(stream.device_index()), stream.id());
    auto it = stream_actors.find(key);
    if (it != stream_actors.end()) return it->second;
    const ActorId id = static_cast<ActorId>(actors.size());
    std::ostringstream name;
    name << "simhpu:" << static_cast<int>(stream.device_index()) << " stream " << stream.id();
    actors.push_back({name.str(), {}});
    stream_actors.emplace(key, id);
    return id;
  }

  Block* block_of(uintptr_t address) {
    auto it = blocks.upper_bound(address);
    if (it == blocks.begin()) return nullptr;
    --it;
    return address < it->first + it->second.bytes ? &it->second : nullptr;
  }
};

State& state() {
  static State* s = new State();
  return *s;
}

std::string where(const LaunchSite& site) {
  return site.known() ? std::string(site.file()) + ":" + std::to_string(site.line()) : "an unknown line";
}

std::string describe(const DeviceTensor& t) {
  std::ostringstream out;
  out << c10::toString(t.dtype) << " tensor of shape [";
  for (size_t i = 0; i < t.sizes.size(); ++i) out << (i ? ", " : "") << t.sizes[i];
  out << "]";
  return out.str();
}

// The bytes a tensor's elements span (for a strided view, from its first to its last element).
bool span_of(const DeviceTensor& t, uintptr_t& begin, uintptr_t& end) {
  if (t.dtype == c10::ScalarType::Undefined || t.data == nullptr) return false;
  int64_t low = 0, high = 0;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] == 0) return false;
    const int64_t reach = (t.sizes[d] - 1) * t.strides[d];
    (reach < 0 ? low : high) += reach;
  }
  const int64_t item = static_cast<int64_t>(c10::elementSize(t.dtype));
  begin = reinterpret_cast<uintptr_t>(t.data) + low * item;
  end = reinterpret_cast<uintptr_t>(t.data) + (high + 1) * item;
  return true;
}

struct Use {
  uintptr_t begin, end;
  bool write;
  std::string what;  // "a float32 tensor of shape [4]"
};

void add_tensor_uses(const DeviceTensor& t, bool write, std::vector<Use>& uses) {
  uintptr_t begin, end;
  if (span_of(t, begin, end)) uses.push_back({begin, end, write, describe(t)});
}

// What a launch reads and writes: each tensor argument's span, read or written
// as its storage is declared; storages it keeps with no tensor argument (a
// collective's buffers), whole.
std::vector<Use> uses_of(const LaunchRecord& record, c10::DeviceIndex device) {
  std::vector<Use> uses;
  std::vector<bool> described(record.keep_alive.size(), false);
  auto visit = [&](const DeviceTensor& t) {
    const bool write = t.storage_slot >= 0 && record.may_write(static_cast<size_t>(t.storage_slot));
    if (t.storage_slot >= 0 && static_cast<size_t>(t.storage_slot) < described.size()) {
      described[t.storage_slot] = true;
    }
    add_tensor_uses(t, write, uses);
  };
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg)) {
      visit(*t);
    } else if (const auto* list = std::get_if<std::vector<DeviceTensor>>(&arg)) {
      for (const auto& t : *list) visit(t);
    }
  }
  for (size_t i = 0; i < record.keep_alive.size(); ++i) {
    const c10::Storage& s = record.keep_alive[i];
    if (described[i] || !s || s.device_type() != c10::DeviceType::PrivateUse1 || s.nbytes() == 0) continue;
    const auto begin = reinterpret_cast<uintptr_t>(host_address(device, s.data()));
    uses.push_back({begin, begin + s.nbytes(), record.may_write(i), std::to_string(s.nbytes()) + " bytes of memory"});
  }
  return uses;
}

std::string race_message(State& st, const Use& use, ActorId me, const char* op, const LaunchSite& site,
                         const Access& earlier, const Block* block) {
  const Actor& them = st.actors[earlier.touch.actor];
  const Actor& us = st.actors[me];
  std::ostringstream out;
  out << "simhpu sanitizer: " << op << " on " << us.name << " (at " << where(site) << ") "
      << (use.write ? "writes" : "reads") << " a " << use.what << " that " << earlier.touch.op << " on "
      << them.name << " (at " << where(earlier.touch.site) << ") " << (earlier.touch.write ? "wrote" : "read")
      << ", and nothing orders the two";
  if (block != nullptr && block->allocated_at.known()) out << "; the memory was allocated at " << where(block->allocated_at);
  if (me == kHost) {
    out << ". Synchronise " << them.name << " first (torch.simhpu.synchronize(), the stream's synchronize(), or "
        << "an event recorded after its work)";
  } else if (earlier.touch.actor == kHost) {
    out << ". The host's access must be complete before the launch";
  } else {
    out << ". Make " << us.name << " wait for " << them.name << " before it (stream.wait_stream(other), or "
        << "other.record_event() then stream.wait_event(event)), or synchronise the host between them";
  }
  return out.str();
}

// Checks `uses` by `me` (whose clock is `clock`) against the recorded history.
// Each race found is reported; in Record mode `clock` then counts the earlier
// access as ordered before (the program goes on as if it had synchronised, so
// one missing synchronisation is one report, not one per later launch).
void check_uses(State& st, const std::vector<Use>& uses, ActorId me, Clock& clock, const char* op,
                const LaunchSite& site) {
  for (const Use& use : uses) {
    Block* block = st.block_of(use.begin);
    if (block == nullptr) continue;
    for (const Access& a : block->accesses) {
      if (a.touch.actor == me || (!a.touch.write && !use.write)) continue;
      if (a.end <= use.begin || use.end <= a.begin) continue;
      if (clock.get(a.touch.actor) >= a.touch.epoch) continue;  // ordered before us
      std::string message = race_message(st, use, me, op, site, a, block);
      TORCH_CHECK(mode() != Mode::Raise, message);
      st.reports.push_back(std::move(message));
      clock.set(a.touch.actor, a.touch.epoch);
    }
  }
}

void record_uses(State& st, const std::vector<Use>& uses, const Touch& base, const Clock& clock) {
  for (const Use& use : uses) {
    Block* block = st.block_of(use.begin);
    if (block == nullptr) continue;
    Touch touch = base;
    touch.write = use.write;
    auto& list = block->accesses;
    // What this access supersedes for later checks: the same actor's earlier
    // access of the same kind to the same bytes, and (a write) anything inside
    // its bytes that is ordered before it.
    list.erase(std::remove_if(list.begin(), list.end(), [&](const Access& a) {
                 const bool inside = use.begin <= a.begin && a.end <= use.end;
                 const bool same = a.touch.actor == touch.actor && a.begin == use.begin && a.end == use.end &&
                     a.touch.write == touch.write;
                 return same || (touch.write && inside && clock.get(a.touch.actor) >= a.touch.epoch);
               }),
               list.end());
    list.push_back({use.begin, use.end, touch});
    if (list.size() > 256) list.erase(list.begin());  // a bound on what one block remembers
  }
}

} // namespace

void set_mode(Mode m) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!enabled() && m != Mode::Off) {
    st.actors.resize(1);
    st.actors[kHost].clock = {};
    st.stream_actors.clear();
    st.event_clocks.clear();
    // The blocks tensors hold now, with no history (where they were allocated is not known).
    st.blocks.clear();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      for (const SegmentInfo& segment : device_segments(d)) {
        if (!segment.active) continue;
        const auto begin = reinterpret_cast<uintptr_t>(host_address(d, reinterpret_cast<void*>(segment.address)));
        st.blocks[begin] = Block{segment.size, LaunchSite{}, {}};
      }
    }
  }
  detail::mode.store(static_cast<int>(m), std::memory_order_relaxed);
}

Mode mode() {
  return static_cast<Mode>(detail::mode.load(std::memory_order_relaxed));
}

void on_launch(const LaunchRecord& record, const c10::Stream& stream) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  const ActorId me = st.actor_of(stream);
  // Work launched after the host waited for something comes after it too.
  st.actors[me].clock.join(st.actors[kHost].clock);
  switch (record.kind) {
    case LaunchRecord::Kind::RecordEvent:
      st.event_clocks[record.event.get()] = st.actors[me].clock;
      return;
    case LaunchRecord::Kind::WaitEvent: {
      auto it = st.event_clocks.find(record.event.get());
      if (it != st.event_clocks.end()) st.actors[me].clock.join(it->second);
      return;
    }
    case LaunchRecord::Kind::Kernel:
      break;
  }
  const std::vector<Use> uses = uses_of(record, stream.device_index());
  Clock& clock = st.actors[me].clock;
  check_uses(st, uses, me, clock, record.op_name, record.site);
  clock.set(me, clock.get(me) + 1);
  record_uses(st, uses, Touch{me, clock.get(me), false, record.op_name, record.site}, clock);
}

void on_host_waited_for_stream(const c10::Stream& stream) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.actors[kHost].clock.join(st.actors[st.actor_of(stream)].clock);
}

void on_host_waited_for_device(c10::DeviceIndex device) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  for (const auto& [key, actor] : st.stream_actors) {
    if (key.first == device) st.actors[kHost].clock.join(st.actors[actor].clock);
  }
}

void on_host_waited_for_event(const void* event) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.event_clocks.find(event);
  if (it != st.event_clocks.end()) st.actors[kHost].clock.join(it->second);
}

void on_host_access(const DeviceTensor& tensor, c10::DeviceIndex /*device*/, bool write, const char* op) {
  if (!enabled()) return;
  // Before the lock: capturing the site may take the GIL, which a thread
  // waiting for this lock (inside a launch) may hold.
  const LaunchSite site = capture_launch_site();
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  std::vector<Use> uses;
  add_tensor_uses(tensor, write, uses);
  Clock& clock = st.actors[kHost].clock;
  check_uses(st, uses, kHost, clock, op, site);
  clock.set(kHost, clock.get(kHost) + 1);
  record_uses(st, uses, Touch{kHost, clock.get(kHost), false, op, site}, clock);
}

void on_allocate(c10::DeviceIndex /*device*/, const void* host_address, size_t bytes) {
  if (!enabled() || bytes == 0) return;
  const LaunchSite site = capture_launch_site();  // before the lock (see on_host_access)
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  const auto begin = reinterpret_cast<uintptr_t>(host_address);
  // Blocks the new one overlaps (a cached block split or merged) are forgotten.
  auto it = st.blocks.lower_bound(begin);
  if (it != st.blocks.begin() && std::prev(it)->first + std::prev(it)->second.bytes > begin) --it;
  while (it != st.blocks.end() && it->first < begin + bytes) it = st.blocks.erase(it);
  st.blocks[begin] = Block{bytes, site, {}};
}

std::vector<std::string> reports() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.reports;
}

void clear_reports() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.reports.clear();
}

} // namespace simhpu::sanitizer
