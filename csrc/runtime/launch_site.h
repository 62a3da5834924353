#pragma once
// Where in the user's Python code a kernel was launched, so an asynchronous
// failure can point there. Captured at enqueue from the innermost Python frame
// outside torch and torch_simhpu. Capture is on every launch's path, so it
// only notes the code object and instruction offset; the file name and line
// are worked out when a message or trace needs them.

namespace simhpu {

struct LaunchSite {
  const void* code = nullptr;  // a PyCodeObject the runtime keeps alive for good
  int instruction = 0;         // byte offset of the launching instruction

  bool known() const { return code != nullptr; }
  const char* file() const;  // interned: lives for the whole process
  int line() const;
};

LaunchSite capture_launch_site();

// Releases the GIL, if this thread holds it, for as long as it lives: a
// thread waiting for the device must not stall other Python threads.
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
