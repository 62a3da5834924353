#pragma once
// Which torch_simhpu and torch a piece of code was compiled against. Operator
// packages pass theirs when they register kernels or ops; the runtime compares
// with its own, so a package built for another release, or against the headers
// of another build of this one, fails with a message naming it instead of
// misbehaving (a struct whose layout changed would crash it).
#include "torch_simhpu/version.h"

#include <torch/headeronly/version.h>

#include <string>

// The installed SDK has torch_simhpu/sdk_stamp.h (written when the wheel is
// built): the hash of the headers a package compiles against. The runtime's own
// sources have none: they are the runtime.
#if __has_include("torch_simhpu/sdk_stamp.h")
#include "torch_simhpu/sdk_stamp.h"
#else
#define TORCH_SIMHPU_SDK_STAMP ""
#endif

namespace simhpu {

struct BuildInfo {
  const char* simhpu_version;
  int torch_major;
  int torch_minor;
  const char* sdk_stamp; // empty: compiled into the runtime itself
};

// What the including translation unit is compiled against.
#define SIMHPU_THIS_BUILD \
  (::simhpu::BuildInfo{TORCH_SIMHPU_VERSION, TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_SIMHPU_SDK_STAMP})

// The runtime's own: its sdk_stamp is the hash of the headers it installed.
BuildInfo runtime_build();

// Empty when `built` matches the runtime; otherwise what differs and what to do,
// for an error about `what` (e.g. "kernel 'my_add'").
std::string build_mismatch(const BuildInfo& built, const std::string& what);

} // namespace simhpu
