#include "sanitizer/stream_sanitizer.h"

#include "chaos/chaos_scheduler.h"
#include "sanitizer/pinned_guard.h"
#include "runtime/capture.h"
#include "runtime/device.h"
#include "runtime/launch_queue.h"
#include "runtime/memory_history.h"
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
void (*release_block)(void* device_ptr) = nullptr;

// The deleter of a hold (see on_launch): the block goes back to the allocator.
void release_held_block(void* device_ptr) {
  release_block(device_ptr);
}

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
};

// A pinned host block launches read later, guarded against host writes until
// the host is ordered after each of them.
struct PinnedReads {
  size_t size = 0;
  std::string what;
  std::vector<Touch> reads;
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
  std::map<uintptr_t, PinnedReads> pinned;  // by block start

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
  out << chaos::note();
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

// The storage of a block dies: a stream other than its allocation stream whose
// use of it is not ordered before the allocation stream's next launches (where
// the allocator hands the block out again), and not covered by record_stream,
// may still read or write it when the block's next tensor does.
void check_free(State& st, uintptr_t begin, const LaunchSite& freed_at) {
  Block* block = st.block_of(begin);
  if (block == nullptr || block->allocated_on == kHost) return;
  const Actor& owner = st.actors[block->allocated_on];
  Clock next = owner.clock;
  next.join(st.actors[kHost].clock);
  for (const Access& a : block->accesses) {
    const ActorId user = a.touch.actor;
    if (user == kHost || user == block->allocated_on || next.get(user) >= a.touch.epoch) continue;
    const auto& recorded = block->recorded_streams;
    if (std::find(recorded.begin(), recorded.end(), user) != recorded.end()) continue;
    const std::string& them = st.actors[user].name;
    std::ostringstream out;
    out << "simhpu sanitizer: a " << (block->what.empty() ? "tensor" : block->what) << " allocated on "
        << owner.name << " (at " << where(block->allocated_at) << ") was freed (at " << where(freed_at) << ") while "
        << a.touch.op << " on " << them << " (at " << where(a.touch.site) << "), launched before, may still "
        << (a.touch.write ? "write" : "read") << " it: nothing orders that use before " << owner.name
        << "'s next launches, and real hardware's caching allocator hands the memory out again to them. Call "
        << "tensor.record_stream(" << them << ") after the use on it, or make " << owner.name << " wait for "
        << them << " before the tensor is dropped" << chaos::note();
    report_later(st, out.str());
    return;  // one report per free
  }
}

// Pinned host blocks the launch reads are guarded until the host is ordered
// after it; one it writes (a copy out of the device) is not, and stops being.
void guard_pinned_reads(State& st, const LaunchRecord& record, ActorId me) {
  auto visit = [&](const DeviceTensor& t) {
    if (t.storage_slot < 0 || static_cast<size_t>(t.storage_slot) >= record.keep_alive.size()) return;
    const c10::Storage& storage = record.keep_alive[t.storage_slot];
    const char* start = nullptr;
    size_t size = 0;
    if (!storage || storage.device_type() != c10::DeviceType::CPU || !pinned_block_of(t.data, &start, &size)) return;
    const auto begin = reinterpret_cast<uintptr_t>(start);
    if (record.may_write(static_cast<size_t>(t.storage_slot))) {
      pinned::unguard(begin);
      st.pinned.erase(begin);
      return;
    }
    PinnedReads& guarded = st.pinned[begin];
    guarded.size = size;
    guarded.what = describe(t);
    guarded.reads.push_back(Touch{me, st.actors[me].clock.get(me), false, record.op_name, record.site});
    if (!pinned::guard(begin, size)) st.pinned.erase(begin);  // (out of slots: unguarded)
  };
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg)) {
      visit(*t);
    } else if (const auto* list = std::get_if<std::vector<DeviceTensor>>(&arg)) {
      for (const auto& t : *list) visit(t);
    }
  }
}

// Reports the guarded blocks the host wrote (the fault handler marked them).
void report_pinned_writes(State& st, const LaunchSite& noticed_at) {
  for (const uintptr_t begin : pinned::take_hits()) {
    auto it = st.pinned.find(begin);
    if (it == st.pinned.end()) continue;
    const Clock& host = st.actors[kHost].clock;
    for (const Touch& read : it->second.reads) {
      if (host.get(read.actor) >= read.epoch) continue;
      std::ostringstream out;
      out << "simhpu sanitizer: the host wrote pinned memory (a " << it->second.what << ") that " << read.op << " on "
          << st.actors[read.actor].name << " (at " << where(read.site) << "), launched before with non_blocking=True, "
          << "may still be reading: nothing ordered the copy before the write (noticed at " << where(noticed_at)
          << "). Synchronise " << st.actors[read.actor].name << ", or an event recorded after the copy, before "
          << "refilling the buffer" << chaos::note();
      report_later(st, out.str());
      break;
    }
    st.pinned.erase(it);
  }
}

// Guards whose reads the host is now ordered after are lifted.
void release_ordered_pinned(State& st) {
  const Clock& host = st.actors[kHost].clock;
  for (auto it = st.pinned.begin(); it != st.pinned.end();) {
    auto& reads = it->second.reads;
    reads.erase(std::remove_if(reads.begin(), reads.end(),
                               [&](const Touch& r) { return host.get(r.actor) >= r.epoch; }),
                reads.end());
    if (reads.empty()) {
      pinned::unguard(it->first);
      it = st.pinned.erase(it);
    } else {
      ++it;
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
    }
    if (it->second.nbytes() >= storage.nbytes()) storage = it->second;
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
    st.pending_raise.clear();
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
  if (m == Mode::Off) {  // nothing is guarded while off
    for (const auto& [begin, reads] : st.pinned) pinned::unguard(begin);
    st.pinned.clear();
    pinned::take_hits();
  }
  detail::mode.store(static_cast<int>(m), std::memory_order_relaxed);
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

void set_block_release(void (*release)(void* device_ptr)) {
  release_block = release;
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
  process(st, record, me, stream.device_index(), record.op_name, record.site);
  if (record.kind == LaunchRecord::Kind::Kernel) {
    hold_blocks(st, record);
    guard_pinned_reads(st, record, me);
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
    report_pinned_writes(st, site);
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
    report_pinned_writes(st, site);
    raise.swap(st.pending_raise);
    detail::has_pending.store(!st.poison_queue.empty(), std::memory_order_relaxed);
  }
  TORCH_CHECK(raise.empty(), raise);
}

void on_host_waited_for_stream(const c10::Stream& stream) {
  if (!enabled()) return;
  const LaunchSite site = pinned::any_hit() ? capture_launch_site() : LaunchSite{};  // before the lock
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  report_pinned_writes(st, site);
  st.actors[kHost].clock.join(st.actors[st.actor_of(stream)].clock);
  release_ordered_pinned(st);
}

void on_host_waited_for_device(c10::DeviceIndex device) {
  if (!enabled()) return;
  const LaunchSite site = pinned::any_hit() ? capture_launch_site() : LaunchSite{};  // before the lock
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  report_pinned_writes(st, site);
  for (const auto& [key, actor] : st.stream_actors) {
    if (key.first == device) st.actors[kHost].clock.join(st.actors[actor].clock);
  }
  release_ordered_pinned(st);
}

void on_host_waited_for_event(const void* event) {
  if (!enabled()) return;
  const LaunchSite site = pinned::any_hit() ? capture_launch_site() : LaunchSite{};  // before the lock
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  report_pinned_writes(st, site);
  auto it = st.event_clocks.find(event);
  if (it != st.event_clocks.end()) st.actors[kHost].clock.join(it->second);
  release_ordered_pinned(st);
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
  std::lock_guard<std::mutex> lock(st.mu);
  const auto begin = reinterpret_cast<uintptr_t>(host_address);
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
    const auto begin = reinterpret_cast<uintptr_t>(host_address(device, device_ptr));
    check_free(st, begin, site);
    const Block* block = st.block_of(begin);
    // (After record_stream the allocator reuses the block only once those
    // streams are past it: nothing can see a reuse, so nothing to poison.)
    if (poison() && block != nullptr && block->allocated_on != kHost && block->recorded_streams.empty()) {
      for (const auto& [key, actor] : st.stream_actors) {
        if (actor != block->allocated_on) continue;
        st.poison_queue.push_back({c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, key.first),
                                               key.second),
                                   hold, block->dtype});
        detail::has_pending.store(true, std::memory_order_relaxed);
      }
    }
  }
  return true;
}

void on_pinned_free(const void* block) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  const auto begin = reinterpret_cast<uintptr_t>(block);
  if (st.pinned.count(begin) == 0) return;
  report_pinned_writes(st, LaunchSite{});
  pinned::unguard(begin);
  st.pinned.erase(begin);
}

std::vector<std::string> reports() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  report_pinned_writes(st, LaunchSite{});
  return st.reports;
}

void clear_reports() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.reports.clear();
}

} // namespace simhpu::sanitizer
