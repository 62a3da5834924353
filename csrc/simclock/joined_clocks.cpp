#include "simclock/joined_clocks.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>

namespace simhpu::simclock::joined {

namespace {

struct Joined {
  std::mutex mu;
  c10::intrusive_ptr<c10d::Store> store;
  int64_t rank = -1;
  std::vector<int64_t> ranks;  // sorted
  std::chrono::milliseconds timeout{0};
};

Joined& joined() {
  static Joined* j = new Joined();  // never destroyed: launches may come during exit
  return *j;
}

bool plays(const Joined& j, int64_t rank) {
  return std::binary_search(j.ranks.begin(), j.ranks.end(), rank);
}

std::vector<uint8_t> encode(double seconds) {
  std::vector<uint8_t> bytes(sizeof(double));
  std::memcpy(bytes.data(), &seconds, sizeof(double));
  return bytes;
}

double decode(const std::vector<uint8_t>& bytes) {
  double seconds = 0;
  TORCH_CHECK(bytes.size() == sizeof(double), "joined clocks: a malformed time in the store");
  std::memcpy(&seconds, bytes.data(), sizeof(double));
  return seconds;
}

std::string collective_key(const LaunchWork& work, int64_t rank) {
  std::ostringstream key;
  key << "c/" << work.group << '/' << work.call_index << '/' << rank;
  return key.str();
}

// A transfer from `from` to `to`, the call_index-th between them that way, and which end.
std::string transfer_key(const LaunchWork& work, int64_t from, int64_t to, bool sender) {
  std::ostringstream key;
  key << "p/" << work.group << '/' << from << '>' << to << '/' << work.call_index << (sender ? "/send" : "/recv");
  return key.str();
}

// What a peer published, waiting for it up to the timeout.
double wait_for(Joined& j, const std::string& key, const char* op, const LaunchWork& work, int64_t peer) {
  try {
    j.store->wait({key}, j.timeout);
    return decode(j.store->get(key));
  } catch (const c10::DistError&) {
    TORCH_CHECK(false, "joined clocks: ", op, " (call ", work.call_index, " of its group) on rank ", j.rank,
                ": rank ", peer, " did not reach it within ", j.timeout.count() / 1000,
                " s; its process ended, failed, or makes the group's calls in another order");
  }
}

} // namespace

void join(const std::string& host, int port, int64_t rank, std::vector<int64_t> ranks,
          std::chrono::milliseconds timeout) {
  std::sort(ranks.begin(), ranks.end());  // (torch_simhpu/simulated_ranks.py checked that `rank` is among them)
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(host, options);
  Joined& j = joined();
  std::lock_guard<std::mutex> lock(j.mu);
  j.store = std::move(store);
  j.rank = rank;
  j.ranks = std::move(ranks);
  j.timeout = timeout;
}

bool active() {
  Joined& j = joined();
  std::lock_guard<std::mutex> lock(j.mu);
  return static_cast<bool>(j.store);
}

bool joined_call(const LaunchWork& work) {
  Joined& j = joined();
  std::lock_guard<std::mutex> lock(j.mu);
  if (!j.store || work.group == 0) return false;
  if (work.collective == CollectiveKind::PointToPoint) return work.peer >= 0 && work.peer != j.rank && plays(j, work.peer);
  if (work.members == nullptr) return false;
  for (int64_t member : *work.members) {
    if (member != j.rank && plays(j, member)) return true;
  }
  return false;
}

double collective_start(const char* op, const LaunchWork& work, double start) {
  Joined& j = joined();
  std::lock_guard<std::mutex> lock(j.mu);
  j.store->set(collective_key(work, j.rank), encode(start));
  double latest = start;
  for (int64_t member : *work.members) {
    if (member != j.rank && plays(j, member)) {
      latest = std::max(latest, wait_for(j, collective_key(work, member), op, work, member));
    }
  }
  return latest;
}

void transfer_ready(const LaunchWork& work, double ready) {
  Joined& j = joined();
  std::lock_guard<std::mutex> lock(j.mu);
  const int64_t from = work.sends ? j.rank : work.peer, to = work.sends ? work.peer : j.rank;
  j.store->set(transfer_key(work, from, to, work.sends), encode(ready));
}

double peer_ready(const char* op, const LaunchWork& work) {
  Joined& j = joined();
  std::lock_guard<std::mutex> lock(j.mu);
  const int64_t from = work.sends ? j.rank : work.peer, to = work.sends ? work.peer : j.rank;
  return wait_for(j, transfer_key(work, from, to, !work.sends), op, work, work.peer);
}

} // namespace simhpu::simclock::joined
