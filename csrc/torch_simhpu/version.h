#pragma once
// The torch_simhpu release these headers belong to (setup.py reads it from here).
// An operator package compiles it in; the runtime refuses what a package built
// against another release registers (see runtime/build_info.h).
#define TORCH_SIMHPU_VERSION "0.1.0"
