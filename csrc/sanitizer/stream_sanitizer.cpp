#include "sanitizer/stream_sanitizer.h"

#include "runtime/observers.h"
#include "sanitizer/pinned_guard.h"
#include "runtime/capture.h"
#include "runtime/device.h"
#include "runtime/launch_queue.h"
#include "runtime/allocator.h"
#include "runtime/pinned_memory.h"
#include "runtime/streams.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace simhpu::sanitizer {
namespace detail {
std::atomic<int> mode{static_cast<int>(Mode::Off)};
std::atomic<bool> has_pending{false};
std::atomic<size_t> held_blocks{0};
} // namespace detail

namespace {

std::atomic<bool> poison_on{false};

// The deleter of a hold (see on_launch): the block goes back to the allocator.
void release_held_block(void* device_ptr) {
  observers::keep(-1);
  release_device_block(device_ptr);
}

// What the runtime shows the sanitizer. It checks launches (a race raises in
// Raise mode, and the launch does not happen), so it sees them before watchers.
class SanitizerLens final : public RuntimeObserver {
 public:
  SanitizerLens() { observers::subscribe(this, observers::Role::Checks); }
  void before_launch() override { sanitizer::before_launch(); }
  void on_launch(LaunchRecord& record, const c10::Stream& stream, const LaunchWork*, bool in_graph) override {
    // (A graph's captured launches are checked when it is replayed.)
    if (!in_graph) sanitizer::on_launch(record, stream);
  }
  void on_host_waited_for_stream(const c10::Stream& stream) override { sanitizer::on_host_waited_for_stream(stream); }
  void on_host_waited_for_device(c10::DeviceIndex device) override { sanitizer::on_host_waited_for_device(device); }
  void on_host_waited_for_event(const void* event) override { sanitizer::on_host_waited_for_event(event); }
  void after_host_wait() override { raise_pending(); }
  void on_host_access(const DeviceTensor& tensor, bool write, const char* op) override {
    sanitizer::on_host_access(tensor, write, op);
  }
  void on_allocate(const c10::Stream& stream, const void* host_address, size_t bytes) override {
    sanitizer::on_allocate(stream, host_address, bytes);
  }
  void on_record_stream(const c10::Stream& stream, const void* block_host_address) override {
    sanitizer::on_record_stream(stream, block_host_address);
  }
  // Asked while off too: blocks held for launches made while on are still given back.
  bool take_over_free(c10::DeviceIndex device, void* device_ptr) override {
    return detail::held_blocks.load(std::memory_order_relaxed) != 0 && take_over_free_slow(device, device_ptr);
  }
  void on_free_held(c10::DeviceIndex device, void* device_ptr) override { sanitizer::on_free(device, device_ptr); }
  void on_pinned_free(const void* block) override { sanitizer::on_pinned_free(block); }
};

SanitizerLens& lens() {
  static SanitizerLens* instance = new SanitizerLens();
  return *instance;
}
const bool lens_subscribed = (lens(), true);

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
  ActorId allocated_on = kHost;  // the allocation stream (kHost: allocated before the sanitizer was on)
  std::vector<ActorId> recorded_streams;  // tensor.record_stream(s)
  std::vector<Access> accesses;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // of the last tensor launched on it
  std::string what;  // "Float tensor of shape [4]", the same tensor
  bool freed = false;  // the program freed it (its memory may still be held for queued launches)
};

// A block the program freed while another stream's use of it was not yet
// ordered before its allocation stream. Real hardware's caching allocator
// hands it out again on that stream at the next allocation it fits; that is
// the moment the use must be ordered by (record_stream, or a wait).
struct FreedBlock {
  c10::DeviceIndex device = 0;
  size_t bytes = 0;
  ActorId allocated_on = kHost;
  LaunchSite allocated_at, freed_at;
  std::string what;
  std::vector<Touch> unordered;  // the other streams' uses not yet ordered before the allocation stream
  c10::Storage hold;  // with poisoning on: the memory, to fill when it is handed out again
  c10::ScalarType dtype = c10::ScalarType::Undefined;
};

// A pinned host block with launches on it the host is not yet ordered after.
// Its history is a Block like a device block's (keyed by the kernels' view, which
// launches use); the program's view is guarded: read-only while launches may
// read it, no access while they may write it (see pinned_guard.h).
struct PinnedGuard {
  uintptr_t kernel_begin = 0;
  size_t size = 0;
  pinned::Access allowed = pinned::Access::ReadWrite;
};

// A freed block to fill on its allocation stream (see before_launch).
struct PendingPoison {
  c10::Stream stream;
  c10::Storage hold;
  c10::ScalarType dtype;
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
  // Holds of the blocks launches used, by device address, until their storage
  // dies (kept when the sanitizer is turned off and on: launches still hold them).
  std::unordered_map<const void*, c10::Storage> holds;
  std::vector<PendingPoison> poison_queue;
  std::string pending_raise;  // Raise mode: what a free found, raised at the next launch
  std::map<uintptr_t, PinnedGuard> pinned;  // by the program view's block start
  std::vector<FreedBlock> freed;  // oldest first

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
  c10::ScalarType dtype;
  const char* op;
};

void add_tensor_uses(const DeviceTensor& t, bool write, const char* op, std::vector<Use>& uses) {
  uintptr_t begin, end;
  if (span_of(t, begin, end)) uses.push_back({begin, end, write, describe(t), t.dtype, op});
}

// What a launch reads and writes: each tensor argument's span, read or written
// as its storage is declared; storages it keeps with no tensor argument (a
// collective's buffers), whole.
void add_uses_of(const LaunchRecord& record, c10::DeviceIndex device, const char* op, std::vector<Use>& uses) {
  std::vector<bool> described(record.keep_alive.size(), false);
  auto visit = [&](const DeviceTensor& t) {
    const bool write = t.storage_slot >= 0 && record.may_write(static_cast<size_t>(t.storage_slot));
    if (t.storage_slot >= 0 && static_cast<size_t>(t.storage_slot) < described.size()) {
      described[t.storage_slot] = true;
    }
    add_tensor_uses(t, write, op, uses);
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
    uses.push_back({begin, begin + s.nbytes(), record.may_write(i), std::to_string(s.nbytes()) + " bytes of memory",
                    c10::ScalarType::Undefined, op});
  }
}

// What a launch reads and writes.
std::vector<Use> uses_of(const LaunchRecord& record, c10::DeviceIndex device, const char* op) {
  std::vector<Use> uses;
  add_uses_of(record, device, op, uses);
  return uses;
}

std::string race_message(State& st, const Use& use, ActorId me, const LaunchSite& site, const Access& earlier,
                         const Block* block) {
  const char* op = use.op;
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
  out << observers::context_notes();
  return out.str();
}

// Checks `uses` by `me` (whose clock is `clock`) against the recorded history.
// Each race found is reported; in Record mode `clock` then counts the earlier
// access as ordered before (the program goes on as if it had synchronised, so
// one missing synchronisation is one report, not one per later launch).
void check_uses(State& st, const std::vector<Use>& uses, ActorId me, Clock& clock, const LaunchSite& site) {
  for (const Use& use : uses) {
    Block* block = st.block_of(use.begin);
    if (block == nullptr) continue;
    for (const Access& a : block->accesses) {
      if (a.touch.actor == me || (!a.touch.write && !use.write)) continue;
      if (a.end <= use.begin || use.end <= a.begin) continue;
      if (clock.get(a.touch.actor) >= a.touch.epoch) continue;  // ordered before us
      std::string message = race_message(st, use, me, site, a, block);
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
    touch.op = use.op;
    if (use.dtype != c10::ScalarType::Undefined) {
      block->dtype = use.dtype;
      block->what = use.what;
    }
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

// Raise mode keeps the first report for the next launch (a free happens in a
// destructor, which cannot raise); Record mode keeps them all.
void report_later(State& st, std::string message) {
  if (mode() == Mode::Raise) {
    if (st.pending_raise.empty()) st.pending_raise = std::move(message);
    detail::has_pending.store(true, std::memory_order_relaxed);
  } else {
    st.reports.push_back(std::move(message));
  }
}

// What may still use a freed block when its allocation stream next takes
// memory: ordered by then are the allocation stream's clock and the host's.
Clock reuse_clock(State& st, ActorId allocation_stream) {
  Clock clock = st.actors[allocation_stream].clock;
  clock.join(st.actors[kHost].clock);
  return clock;
}

// The program freed a block (its storage died, or was resized): another
// stream's use not ordered before the allocation stream, and not covered by
// record_stream, is kept, to be judged when that stream takes memory again.
void check_free(State& st, c10::DeviceIndex device, uintptr_t begin, const LaunchSite& freed_at, c10::Storage hold) {
  Block* block = st.block_of(begin);
  if (block == nullptr || block->freed || block->allocated_on == kHost) return;
  block->freed = true;
  const Clock ordered = reuse_clock(st, block->allocated_on);
  FreedBlock freed;
  for (const Access& a : block->accesses) {
    const ActorId user = a.touch.actor;
    if (user == kHost || user == block->allocated_on || ordered.get(user) >= a.touch.epoch) continue;
    const auto& recorded = block->recorded_streams;
    if (std::find(recorded.begin(), recorded.end(), user) != recorded.end()) continue;
    freed.unordered.push_back(a.touch);
  }
  if (freed.unordered.empty()) return;
  freed.device = device;
  freed.bytes = block->bytes;
  freed.allocated_on = block->allocated_on;
  freed.allocated_at = block->allocated_at;
  freed.freed_at = freed_at;
  freed.what = block->what.empty() ? "tensor" : block->what;
  freed.dtype = block->dtype;
  if (poison()) freed.hold = std::move(hold);
  st.freed.push_back(std::move(freed));
  if (st.freed.size() > 4096) st.freed.erase(st.freed.begin());  // a bound on what is remembered
}

// Forgets the uses of a freed block that `ordered` covers; true if none is left.
bool drop_ordered_uses(FreedBlock& f, const Clock& ordered) {
  auto& uses = f.unordered;
  uses.erase(std::remove_if(uses.begin(), uses.end(), [&](const Touch& u) { return ordered.get(u.actor) >= u.epoch; }),
             uses.end());
  return uses.empty();
}

// Whether CUDA's caching allocator could serve a request of `bytes` from a
// freed block of `block_bytes`: one no smaller, from the same pool (requests
// of at most 1 MiB come from the small blocks, larger ones from the large).
bool could_reuse(size_t bytes, size_t block_bytes) {
  constexpr size_t kSmallRequest = size_t(1) << 20;
  return bytes <= block_bytes && (bytes <= kSmallRequest) == (block_bytes <= kSmallRequest);
}

std::string reuse_message(const State& st, const FreedBlock& f, const Touch& use, const LaunchSite& reused_at) {
  const std::string& owner = st.actors[f.allocated_on].name;
  const std::string& them = st.actors[use.actor].name;
  std::ostringstream out;
  out << "simhpu sanitizer: a " << f.what << " allocated on " << owner << " (at " << where(f.allocated_at)
      << ") was freed (at " << where(f.freed_at) << ") while " << use.op << " on " << them << " (at "
      << where(use.site) << "), launched before, may still " << (use.write ? "write" : "read")
      << " it, and " << owner << " took memory again (at " << where(reused_at) << ") before anything ordered that "
      << "use: real hardware's caching allocator hands the block to that allocation. Call tensor.record_stream("
      << them << ") after the use on it, or make " << owner << " wait for " << them
      << " before it allocates again" << observers::context_notes();
  return out.str();
}

// A stream takes memory: the blocks freed on it that this allocation could be
// served from are judged now (and, with poisoning on, filled on the stream, as
// the new tensor would overwrite them); those whose uses are ordered by now are forgotten.
// Holds of blocks no longer needed are moved to `dropped`, released after the lock.
void judge_reuse(State& st, c10::DeviceIndex device, ActorId me, size_t bytes, const LaunchSite& site,
                 std::vector<c10::Storage>& dropped) {
  if (st.freed.empty()) return;
  const Clock ordered = reuse_clock(st, me);
  for (auto it = st.freed.begin(); it != st.freed.end();) {
    FreedBlock& f = *it;
    if (f.allocated_on != me || f.device != device) {
      ++it;
      continue;
    }
    const bool ordered_now = drop_ordered_uses(f, ordered);
    if (!ordered_now && !could_reuse(bytes, f.bytes)) {
      ++it;
      continue;
    }
    if (!ordered_now) {
      report_later(st, reuse_message(st, f, f.unordered.front(), site));
      if (f.hold) {
        for (const auto& [key, actor] : st.stream_actors) {
          if (actor != me) continue;
          st.poison_queue.push_back({c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, key.first),
                                                 key.second),
                                     f.hold, f.dtype});
          detail::has_pending.store(true, std::memory_order_relaxed);
        }
      }
    }
    if (f.hold) dropped.push_back(std::move(f.hold));
    it = st.freed.erase(it);
  }
}

// Freed blocks whose uses the host's waits have ordered are forgotten (their memory, if held, goes back).
void forget_ordered_frees(State& st, std::vector<c10::Storage>& dropped) {
  for (auto it = st.freed.begin(); it != st.freed.end();) {
    if (!drop_ordered_uses(*it, reuse_clock(st, it->allocated_on))) {
      ++it;
      continue;
    }
    if (it->hold) dropped.push_back(std::move(it->hold));
    it = st.freed.erase(it);
  }
}

// The host accesses that a pinned block's unordered launches leave allowed:
// none while one may write it, reading while they may only read it.
pinned::Access allowed_to_host(State& st, const Block& block) {
  const Clock& host = st.actors[kHost].clock;
  pinned::Access allowed = pinned::Access::ReadWrite;
  for (const Access& a : block.accesses) {
    if (a.touch.actor == kHost || host.get(a.touch.actor) >= a.touch.epoch) continue;
    if (a.touch.write) return pinned::Access::None;
    allowed = pinned::Access::Read;
  }
  return allowed;
}

// Pinned host blocks a launch uses get a history, like device blocks, so
// launches on them are judged by launch order (before the launch is processed).
void register_pinned_blocks(State& st, const LaunchRecord& record) {
  for (const c10::Storage& storage : record.keep_alive) {
    if (!storage || storage.device_type() != c10::DeviceType::CPU || !is_pinned_data(storage.data_ptr())) continue;
    const PinnedViews views = pinned_views(storage.data_ptr());
    const auto kernel_begin = reinterpret_cast<uintptr_t>(views.kernel);
    if (st.block_of(kernel_begin) != nullptr) continue;
    st.blocks[kernel_begin].bytes = views.size;
    st.pinned[reinterpret_cast<uintptr_t>(views.program)] = PinnedGuard{kernel_begin, views.size, pinned::Access::ReadWrite};
  }
}

// Each pinned block's guard, after launches or host waits changed what is unordered.
void update_pinned_guards(State& st) {
  for (auto& [begin, guard] : st.pinned) {
    const Block* block = st.block_of(guard.kernel_begin);
    const pinned::Access allowed = block == nullptr ? pinned::Access::ReadWrite : allowed_to_host(st, *block);
    if (allowed == guard.allowed) continue;
    guard.allowed = pinned::protect(begin, guard.size, allowed) ? allowed : pinned::Access::ReadWrite;
  }
}

// The host touched guarded pinned blocks (the fault handler noted which, and
// let the access go ahead): each is judged as a host access against the
// block's launches, by launch order, and reported.
void report_pinned_hits(State& st, const LaunchSite& noticed_at) {
  for (const pinned::Hit& hit : pinned::take_hits()) {
    auto it = st.pinned.find(hit.begin);
    if (it == st.pinned.end()) continue;
    it->second.allowed = pinned::Access::ReadWrite;  // the handler lifted the guard
    Block* block = st.block_of(it->second.kernel_begin);
    if (block == nullptr) continue;
    const Clock& host = st.actors[kHost].clock;
    for (const Access& a : block->accesses) {
      if (a.touch.actor == kHost || host.get(a.touch.actor) >= a.touch.epoch) continue;
      if (!hit.write && !a.touch.write) continue;  // two reads
      const std::string& them = st.actors[a.touch.actor].name;
      const std::string what = block->what.empty() ? "buffer" : block->what;
      std::ostringstream out;
      out << "simhpu sanitizer: the host " << (hit.write ? "wrote" : "read") << " pinned memory (a " << what
          << ") that " << a.touch.op << " on " << them << " (at " << where(a.touch.site)
          << "), launched before with non_blocking=True, may still be " << (a.touch.write ? "writing" : "reading")
          << ": nothing ordered the copy before the " << (hit.write ? "write" : "read") << " (noticed at "
          << where(noticed_at) << "). Synchronise " << them << ", or an event recorded after the copy, before "
          << (hit.write ? "refilling the buffer" : "reading the buffer") << observers::context_notes();
      report_later(st, out.str());
      break;
    }
  }
}

// Fills a freed block as a reuse would overwrite it: NaN for floating types, 0xA5 bytes otherwise.
void poison_block(KernelArgs& args) {
  const auto& block = std::get<DeviceTensor>(args[0]);
  const auto dtype = std::get<c10::ScalarType>(args[1]);
  auto* bytes = static_cast<unsigned char*>(block.data);
  const size_t count = static_cast<size_t>(block.sizes[0]);
  std::memset(bytes, 0xA5, count);
  uint64_t nan = 0;
  size_t item = 0;
  switch (c10::isComplexType(dtype) ? c10::toRealValueType(dtype) : dtype) {
    case c10::ScalarType::Float: nan = 0x7fc00000u, item = 4; break;
    case c10::ScalarType::Double: nan = 0x7ff8000000000000ull, item = 8; break;
    case c10::ScalarType::Half: nan = 0x7e00u, item = 2; break;
    case c10::ScalarType::BFloat16: nan = 0x7fc0u, item = 2; break;
    default: return;
  }
  for (size_t at = 0; at + item <= count; at += item) std::memcpy(bytes + at, &nan, item);  // little-endian
}

const KernelDef kPoison{"sanitizer_poison", &poison_block};

void launch_poison(const PendingPoison& p) {
  const c10::Storage& hold = p.hold;
  LaunchSlot slot(p.stream, LaunchSlot::kBypassCapture);
  LaunchRecord& record = slot.record();
  record.kernel = &kPoison;
  record.op_name = "simhpu sanitizer: poison a freed block";
  record.keep_alive.push_back(hold);
  record.mark_written(0);
  DeviceTensor bytes;
  bytes.data = host_address(p.stream.device_index(), hold.data());
  bytes.dtype = c10::ScalarType::Byte;
  bytes.sizes = {static_cast<int64_t>(hold.nbytes())};
  bytes.strides = {1};
  bytes.storage_slot = 0;
  record.args.push_back(std::move(bytes));
  record.args.push_back(p.dtype);
  slot.commit();
}

// Swaps the record's storages of allocator blocks for holds of the blocks, so
// the storage can die (and its free be checked) while the launch is pending.
void hold_blocks(State& st, LaunchRecord& record) {
  static const c10::DeleterFnPtr block_deleter = c10::GetAllocator(c10::DeviceType::PrivateUse1)->raw_deleter();
  for (c10::Storage& storage : record.keep_alive) {
    if (!storage || storage.device_type() != c10::DeviceType::PrivateUse1) continue;
    const c10::DataPtr& data = storage.data_ptr();
    if (data.get_deleter() != block_deleter || data.get_context() != data.get() || data.get() == nullptr) continue;
    auto [it, added] = st.holds.try_emplace(data.get());
    if (added) {
      it->second = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(), storage.nbytes(),
          c10::DataPtr(data.get(), data.get(), &release_held_block, storage.device()), nullptr, false));
      detail::held_blocks.fetch_add(1, std::memory_order_relaxed);
      observers::keep(1);
    }
    if (it->second.nbytes() >= storage.nbytes()) storage = it->second;
  }
}

} // namespace

void set_mode(Mode m) {
  State& st = state();
  std::vector<PendingPoison> unpoisoned;  // their holds are dropped after the lock
  std::lock_guard<std::mutex> lock(st.mu);
  if (!enabled() && m != Mode::Off) {
    st.actors.resize(1);
    st.actors[kHost].clock = {};
    st.stream_actors.clear();
    st.event_clocks.clear();
    st.pending_raise.clear();
    st.freed.clear();
    for (const auto& [begin, guard] : st.pinned) pinned::protect(begin, guard.size, pinned::Access::ReadWrite);
    st.pinned.clear();
    // The blocks tensors hold now, with no history (where they were allocated is not known).
    st.blocks.clear();
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      for (const SegmentInfo& segment : device_segments(d)) {
        if (!segment.active) continue;
        const auto begin = reinterpret_cast<uintptr_t>(host_address(d, reinterpret_cast<void*>(segment.address)));
        st.blocks[begin] = Block{segment.size, LaunchSite{}};
      }
    }
  }
  if (m == Mode::Off) {  // nothing is guarded while off, nor poisoned or raised later
    for (const auto& [begin, guard] : st.pinned) pinned::protect(begin, guard.size, pinned::Access::ReadWrite);
    st.pinned.clear();
    pinned::take_hits();
    unpoisoned.swap(st.poison_queue);
    st.pending_raise.clear();
    detail::has_pending.store(false, std::memory_order_relaxed);
  }
  detail::mode.store(static_cast<int>(m), std::memory_order_relaxed);
  observers::set_active(&lens(), m != Mode::Off);
}

Mode mode() {
  return static_cast<Mode>(detail::mode.load(std::memory_order_relaxed));
}

void set_poison(bool on) {
  poison_on.store(on, std::memory_order_relaxed);
}

bool poison() {
  return poison_on.load(std::memory_order_relaxed);
}

namespace {

// One record on `me`'s stream, under `op` and `site`.
void process(State& st, const LaunchRecord& record, ActorId me, c10::DeviceIndex device, const char* op,
             const LaunchSite& site) {
  switch (record.kind) {
    case LaunchRecord::Kind::RecordEvent:
      st.event_clocks[record.event.get()] = st.actors[me].clock;
      return;
    case LaunchRecord::Kind::WaitEvent: {
      auto it = st.event_clocks.find(record.event.get());
      if (it != st.event_clocks.end()) st.actors[me].clock.join(it->second);
      return;
    }
    case LaunchRecord::Kind::Hold:  // touches nothing
      return;
    case LaunchRecord::Kind::Kernel:
      break;
  }
  const std::vector<Use> uses = uses_of(record, device, op);
  Clock& clock = st.actors[me].clock;
  check_uses(st, uses, me, clock, site);
  clock.set(me, clock.get(me) + 1);
  record_uses(st, uses, Touch{me, clock.get(me), false, op, site}, clock);
}

} // namespace

void on_launch(LaunchRecord& record, const c10::Stream& stream) {
  if (!enabled() || record.kernel == &kPoison) return;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  const ActorId me = st.actor_of(stream);
  // Work launched after the host waited for something comes after it too.
  st.actors[me].clock.join(st.actors[kHost].clock);
  if (const LaunchSequence* graph = graph_replayed_by(record)) {
    // What each captured launch does, at the replay's line.
    for (const LaunchRecord& inner : graph->records) {
      const char* op = intern_name(std::string(record.op_name) + " (its " + inner.op_name + ")");
      process(st, inner, me, stream.device_index(), op, record.site);
    }
    return;  // (the graph holds its memory)
  }
  const bool kernel = record.kind == LaunchRecord::Kind::Kernel;
  if (kernel) register_pinned_blocks(st, record);
  process(st, record, me, stream.device_index(), record.op_name, record.site);
  if (kernel) {
    hold_blocks(st, record);
    if (!st.pinned.empty()) update_pinned_guards(st);
  }
}

void before_launch_slow() {
  if (on_launch_worker()) return;  // a kernel's own launches: the host thread does this
  const LaunchSite site = pinned::any_hit() ? capture_launch_site() : LaunchSite{};  // before the lock
  State& st = state();
  std::vector<PendingPoison> poisons;
  std::string raise;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    report_pinned_hits(st, site);
    poisons.swap(st.poison_queue);
    if (mode() == Mode::Raise) raise.swap(st.pending_raise);
    detail::has_pending.store(!st.pending_raise.empty(), std::memory_order_relaxed);
  }
  for (const PendingPoison& p : poisons) launch_poison(p);
  TORCH_CHECK(raise.empty(), raise);
}

void raise_pending() {
  if (!detail::has_pending.load(std::memory_order_relaxed) || mode() != Mode::Raise) return;
  const LaunchSite site = pinned::any_hit() ? capture_launch_site() : LaunchSite{};  // before the lock
  State& st = state();
  std::string raise;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    report_pinned_hits(st, site);
    raise.swap(st.pending_raise);
    detail::has_pending.store(!st.poison_queue.empty(), std::memory_order_relaxed);
  }
  TORCH_CHECK(raise.empty(), raise);
}

void on_host_waited_for_stream(const c10::Stream& stream) {
  if (!enabled()) return;
  const LaunchSite site = pinned::any_hit() ? capture_launch_site() : LaunchSite{};  // before the lock
  State& st = state();
  std::vector<c10::Storage> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(st.mu);
  report_pinned_hits(st, site);
  st.actors[kHost].clock.join(st.actors[st.actor_of(stream)].clock);
  update_pinned_guards(st);
  forget_ordered_frees(st, dropped);
}

void on_host_waited_for_device(c10::DeviceIndex device) {
  if (!enabled()) return;
  const LaunchSite site = pinned::any_hit() ? capture_launch_site() : LaunchSite{};  // before the lock
  State& st = state();
  std::vector<c10::Storage> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(st.mu);
  report_pinned_hits(st, site);
  for (const auto& [key, actor] : st.stream_actors) {
    if (key.first == device) st.actors[kHost].clock.join(st.actors[actor].clock);
  }
  update_pinned_guards(st);
  forget_ordered_frees(st, dropped);
}

void on_host_waited_for_event(const void* event) {
  if (!enabled()) return;
  const LaunchSite site = pinned::any_hit() ? capture_launch_site() : LaunchSite{};  // before the lock
  State& st = state();
  std::vector<c10::Storage> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(st.mu);
  report_pinned_hits(st, site);
  auto it = st.event_clocks.find(event);
  if (it != st.event_clocks.end()) st.actors[kHost].clock.join(it->second);
  update_pinned_guards(st);
  forget_ordered_frees(st, dropped);
}

void on_host_access(const DeviceTensor& tensor, bool write, const char* op) {
  if (!enabled()) return;
  // Before the lock: capturing the site may take the GIL, which a thread
  // waiting for this lock (inside a launch) may hold.
  const LaunchSite site = capture_launch_site();
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  std::vector<Use> uses;
  add_tensor_uses(tensor, write, op, uses);
  Clock& clock = st.actors[kHost].clock;
  check_uses(st, uses, kHost, clock, site);
  clock.set(kHost, clock.get(kHost) + 1);
  record_uses(st, uses, Touch{kHost, clock.get(kHost), false, op, site}, clock);
}

void on_allocate(const c10::Stream& stream, const void* host_address, size_t bytes) {
  if (!enabled() || bytes == 0) return;
  const LaunchSite site = capture_launch_site();  // before the lock (see on_host_access)
  State& st = state();
  std::vector<c10::Storage> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(st.mu);
  const auto begin = reinterpret_cast<uintptr_t>(host_address);
  judge_reuse(st, stream.device_index(), st.actor_of(stream), bytes, site, dropped);
  // Blocks the new one overlaps (a cached block split or merged) are forgotten.
  auto it = st.blocks.lower_bound(begin);
  if (it != st.blocks.begin() && std::prev(it)->first + std::prev(it)->second.bytes > begin) --it;
  while (it != st.blocks.end() && it->first < begin + bytes) it = st.blocks.erase(it);
  Block& block = st.blocks[begin];
  block.bytes = bytes;
  block.allocated_at = site;
  block.allocated_on = st.actor_of(stream);
}

void on_record_stream(const c10::Stream& stream, const void* block_host_address) {
  if (!enabled()) return;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (Block* block = st.block_of(reinterpret_cast<uintptr_t>(block_host_address))) {
    block->recorded_streams.push_back(st.actor_of(stream));
  }
}

bool take_over_free_slow(c10::DeviceIndex device, void* device_ptr) {
  const bool checking = enabled();
  const LaunchSite site = checking ? capture_launch_site() : LaunchSite{};  // before the lock
  State& st = state();
  c10::Storage hold;  // dropped after the lock: the block may go back to the allocator then
  {
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.holds.find(device_ptr);
    if (it == st.holds.end()) return false;
    hold = std::move(it->second);
    st.holds.erase(it);
    detail::held_blocks.fetch_sub(1, std::memory_order_relaxed);
    if (!checking) return true;
    check_free(st, device, reinterpret_cast<uintptr_t>(host_address(device, device_ptr)), site, hold);
  }
  return true;
}

void on_free(c10::DeviceIndex device, void* device_ptr) {
  if (!enabled()) return;
  const LaunchSite site = capture_launch_site();  // before the lock
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  auto held = st.holds.find(device_ptr);
  check_free(st, device, reinterpret_cast<uintptr_t>(host_address(device, device_ptr)), site,
             held == st.holds.end() ? c10::Storage() : held->second);
}

void on_pinned_free(const void* block) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  const auto begin = reinterpret_cast<uintptr_t>(block);
  auto it = st.pinned.find(begin);
  if (it == st.pinned.end()) return;
  report_pinned_hits(st, LaunchSite{});
  pinned::protect(begin, it->second.size, pinned::Access::ReadWrite);
  st.blocks.erase(it->second.kernel_begin);
  st.pinned.erase(it);
}

std::vector<std::string> reports() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  report_pinned_hits(st, LaunchSite{});
  return st.reports;
}

void clear_reports() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.reports.clear();
}

} // namespace simhpu::sanitizer
