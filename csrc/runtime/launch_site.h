#pragma once
// Where in the user's Python code a kernel was launched, so an asynchronous
// failure can point there. Captured at enqueue from the innermost Python frame
// (only when the launching thread holds the GIL; autograd's threads do not).

namespace simhpu {

struct LaunchSite {
  const char* file = nullptr;  // interned: lives for the whole process
  int line = 0;
};

LaunchSite capture_launch_site();

// Releases the GIL, if this thread holds it, for as long as it lives: a
// producer waiting for room in a full queue must not stall other Python threads.
class GilRelease {
 public:
  GilRelease();
  ~GilRelease();
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  void* saved_ = nullptr;
};

} // namespace simhpu
