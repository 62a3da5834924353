#pragma once
// Which way each operator call ran, and which operators may take the
// reference path at all (PyTorch's PrivateUse1 guide: global, selective and
// blocklist fallback).
//
//   dedicated     a kernel of the device's own (op_plugin_functions.yaml, minimal ops)
//   reference     ATen's CPU kernel run as a device kernel, asynchronously
//   synchronized  the same, but the host waited for the device first (the output
//                 shape depends on data, or the operator has no meta kernel)
#include <ATen/core/operator_name.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace simhpu {

enum class Route : uint8_t { Dedicated = 0, Reference = 1, Synchronized = 2 };

namespace detail {
extern std::atomic<int> route_counting_depth;
void add_route_count(const char* op_name, Route route);
} // namespace detail

// Counts a call while some Python block asks for counts (cheap otherwise).
inline void count_route(const char* op_name, Route route) {
  if (detail::route_counting_depth.load(std::memory_order_relaxed) > 0) {
    detail::add_route_count(op_name, route);
  }
}

struct RouteCount {
  std::string op;
  int64_t dedicated = 0;
  int64_t reference = 0;
  int64_t synchronized = 0;
};

void start_counting_routes();
void stop_counting_routes();
// Totals since the process started counting (callers take differences).
std::vector<RouteCount> route_counts();

enum class FallbackMode : uint8_t { Global, Selective, Blocklist };

// Replaces the policy. `ops` are names like "aten::exp", "exp" (every
// overload) or "aten::add.Tensor" (one overload).
void set_fallback_policy(FallbackMode mode, std::vector<std::string> ops);
FallbackMode fallback_mode();
std::vector<std::string> fallback_ops();
FallbackMode parse_fallback_mode(const std::string& text, const char* where);

// Bumped by every set_fallback_policy, so callers may cache allowed().
uint64_t fallback_policy_version();
bool reference_path_allowed(const c10::OperatorName& name);

// Throws NotImplementedError naming the op, the policy and how to allow it.
[[noreturn]] void refuse_reference_path(const std::string& op_name);

} // namespace simhpu
