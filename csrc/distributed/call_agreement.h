#pragma once
// What the ranks' calls of one collective must agree on, checked before the
// transport runs it. Gloo given mismatched calls aborts the process (an
// exception thrown in its own threads) or leaves outputs partly written; here
// every rank first gathers every rank's signature of the call (one small
// all_gather on the transport, in the group's order), and a mismatch fails the
// collective on every rank alike, naming what differs, before any data moves.
// SIMHPU_COLLECTIVE_CHECKS=0 turns the exchange off.
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>

namespace simhpu {

// -1: the collective has no such field, or its ranks may differ in it.
struct CallSignature {
  int64_t collective = -1;  // c10d::OpType
  int64_t root = -1;        // broadcast, reduce, gather, scatter
  int64_t reduce_op = -1;   // c10d::ReduceOp::RedOpType
  int64_t dtype = -1;       // c10::ScalarType
  int64_t elements = -1;    // what each rank contributes (or receives), in elements
  int64_t tensors = -1;     // how many tensors each rank passes
};

// Whether the exchange is on (SIMHPU_COLLECTIVE_CHECKS, read once).
bool collective_checks_enabled();

// Gathers every rank's signature over `transport`; raises, naming the
// collective and each field that differs with every rank's value, unless all agree.
void check_ranks_agree(c10d::Backend& transport, const char* name, const CallSignature& mine);

} // namespace simhpu
