#include "aten/op_routes.h"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

namespace simhpu {
namespace detail {

std::atomic<int> route_counting_depth{0};

namespace {
std::mutex counts_mu;
std::map<std::string, std::array<int64_t, 3>>& counts() {
  static auto* m = new std::map<std::string, std::array<int64_t, 3>>();
  return *m;
}
} // namespace

void add_route_count(const char* op_name, Route route) {
  std::lock_guard<std::mutex> lock(counts_mu);
  ++counts()[op_name][static_cast<int>(route)];
}

} // namespace detail

void start_counting_routes() {
  detail::route_counting_depth.fetch_add(1);
}

void stop_counting_routes() {
  detail::route_counting_depth.fetch_sub(1);
}

std::vector<RouteCount> route_counts() {
  std::lock_guard<std::mutex> lock(detail::counts_mu);
  std::vector<RouteCount> out;
  for (const auto& [op, n] : detail::counts()) {
    out.push_back({op, n[0], n[1], n[2]});
  }
  return out;
}

namespace {

struct Policy {
  std::mutex mu;
  FallbackMode mode = FallbackMode::Global;
  std::vector<std::string> ops;
  std::atomic<uint64_t> version{1};
};

std::vector<std::string> split_ops(const char* text) {
  std::vector<std::string> ops;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) {
      ops.push_back(item);
    }
  }
  return ops;
}

// "exp" and "aten::exp" name every overload; "aten::add.Tensor" one.
std::string normalised(const std::string& name) {
  return name.find("::") == std::string::npos ? "aten::" + name : name;
}

Policy& policy() {
  static Policy* p = [] {
    auto* fresh = new Policy();
    if (const char* mode = std::getenv("SIMHPU_FALLBACK")) {
      fresh->mode = parse_fallback_mode(mode, "SIMHPU_FALLBACK");
    }
    if (const char* ops = std::getenv("SIMHPU_FALLBACK_OPS")) {
      for (auto& op : split_ops(ops)) {
        fresh->ops.push_back(normalised(op));
      }
    }
    return fresh;
  }();
  return *p;
}

const char* mode_name(FallbackMode mode) {
  switch (mode) {
    case FallbackMode::Global: return "global";
    case FallbackMode::Selective: return "selective";
    case FallbackMode::Blocklist: return "blocklist";
  }
  return "?";
}

} // namespace

FallbackMode parse_fallback_mode(const std::string& text, const char* where) {
  if (text == "global") return FallbackMode::Global;
  if (text == "selective") return FallbackMode::Selective;
  if (text == "blocklist") return FallbackMode::Blocklist;
  TORCH_CHECK_VALUE(false, where, ": expected 'global', 'selective' or 'blocklist', got '", text, "'");
}

void set_fallback_policy(FallbackMode mode, std::vector<std::string> ops) {
  auto& p = policy();
  std::lock_guard<std::mutex> lock(p.mu);
  p.mode = mode;
  p.ops.clear();
  for (auto& op : ops) {
    p.ops.push_back(normalised(op));
  }
  p.version.fetch_add(1);
}

FallbackMode fallback_mode() {
  auto& p = policy();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.mode;
}

std::vector<std::string> fallback_ops() {
  auto& p = policy();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.ops;
}

uint64_t fallback_policy_version() {
  return policy().version.load(std::memory_order_acquire);
}

bool reference_path_allowed(const c10::OperatorName& name) {
  auto& p = policy();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.mode == FallbackMode::Global) {
    return true;
  }
  const std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  const bool listed = std::any_of(p.ops.begin(), p.ops.end(), [&](const std::string& op) {
    return op == name.name || op == full || (name.overload_name.empty() && op == name.name + ".default");
  });
  return p.mode == FallbackMode::Selective ? listed : !listed;
}

void refuse_reference_path(const std::string& op_name) {
  const FallbackMode mode = fallback_mode();
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "simhpu: ", op_name, " has no dedicated simhpu kernel, and the fallback policy (",
      mode_name(mode), ") ", mode == FallbackMode::Selective ? "does not list it" : "blocks it",
      ", so it may not run on the reference path. Allow it with ",
      mode == FallbackMode::Selective ? "SIMHPU_FALLBACK_OPS=...," + op_name
                                      : std::string("SIMHPU_FALLBACK_OPS without it"),
      " or torch.simhpu.set_fallback(...), or give it a kernel in op_plugin_functions.yaml.");
}

} // namespace simhpu
