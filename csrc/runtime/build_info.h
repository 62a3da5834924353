#pragma once
// Which torch_simhpu and torch a piece of code was compiled against. Operator
// packages pass theirs when they register kernels or ops; the runtime compares
// with its own, so a package built for another release fails with a message
// naming it instead of misbehaving.
#include "torch_simhpu/version.h"

#include <torch/headeronly/version.h>

#include <string>

namespace simhpu {

struct BuildInfo {
  const char* simhpu_version;
  int torch_major;
  int torch_minor;
};

// What the including translation unit is compiled against.
#define SIMHPU_THIS_BUILD \
  (::simhpu::BuildInfo{TORCH_SIMHPU_VERSION, TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR})

// The runtime's own.
BuildInfo runtime_build();

// Empty when `built` matches the runtime; otherwise what differs and what to do,
// for an error about `what` (e.g. "kernel 'my_add'").
std::string build_mismatch(const BuildInfo& built, const std::string& what);

} // namespace simhpu
