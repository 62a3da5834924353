#include "runtime/own_work.h"

namespace simhpu {
namespace {
thread_local int depth = 0;
} // namespace

OwnWorkScope::OwnWorkScope() { ++depth; }
OwnWorkScope::~OwnWorkScope() { --depth; }

bool own_work() { return depth > 0; }

} // namespace simhpu
