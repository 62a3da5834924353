#pragma once
// Launches simhpu makes for itself rather than for the program: fitting a reference
// kernel to the operator the part runs (a CPU kernel's gradients copied back into
// the layout the operator promises, grouped-query attention's key and value heads
// repeated for a kernel that does not group). They run as any launch does (the
// sanitizer sees what they read and write); a lens that prices the part leaves
// them out, because the part's own kernel does that work in place.
namespace simhpu {

// While one lives, this thread's launches are simhpu's own work.
class OwnWorkScope {
 public:
  OwnWorkScope();
  ~OwnWorkScope();
  OwnWorkScope(const OwnWorkScope&) = delete;
  OwnWorkScope& operator=(const OwnWorkScope&) = delete;
};

// Whether this thread's launches now are simhpu's own work.
bool own_work();

} // namespace simhpu
