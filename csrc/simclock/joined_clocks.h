#pragma once
// Joined clocks: several processes, each playing one rank of a simulated world
// (torch_simhpu/simulated_ranks.py), agree through a store they share on when
// their group calls start, so that a rank that reaches a call late delays its
// peers there as it would on the real parts. A collective starts when the last
// of its members played by some process has reached it; a point-to-point
// transfer, once both ends have. Members no process plays are taken to be on
// time. Opt-in: several ranks given to the simulation command, or
// SIMHPU_JOINED_RANKS and SIMHPU_JOIN_STORE.
//
// The exchange happens at launch, on the launching thread: a collective's
// launch waits on the host until its present peers have launched it too (the
// order NCCL needs anyway); a transfer's end publishes its readiness at launch
// and learns its peer's where the program waits for the transfer, so a batch
// of sends and receives in both directions does not wait on itself.
#include "runtime/launch_work.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace simhpu::simclock::joined {

// Joins the clocks of the processes playing `ranks` (this one plays `rank`)
// through the store at host:port.
void join(const std::string& host, int port, int64_t rank, std::vector<int64_t> ranks,
          std::chrono::milliseconds timeout);
bool active();

// Whether the call `work` describes has an end in another process that joined.
bool joined_call(const LaunchWork& work);

// A collective this process would start at `start`: publishes it and returns
// the latest start of the call's members that joined.
double collective_start(const char* op, const LaunchWork& work, double start);

// A point-to-point transfer: this end is ready at `ready`; publishes it.
void transfer_ready(const LaunchWork& work, double ready);
// When the other end of the transfer was ready (waits for it to say).
double peer_ready(const char* op, const LaunchWork& work);

} // namespace simhpu::simclock::joined
