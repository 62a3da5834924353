#pragma once
// Where in the user's code a kernel was launched, so an asynchronous failure
// can point there, and how a thread about to wait for the device lets other
// Python threads run. The runtime knows nothing of Python: the Python layer
// installs hooks for both at module init (python/launch_site.cpp); without
// them sites are unknown and waiting releases nothing.

namespace simhpu {

struct LaunchSite {
  const void* code = nullptr;  // an opaque handle the hooks keep alive for good
  int instruction = 0;         // where in `code` the launch happened

  bool known() const { return code != nullptr; }
  const char* file() const;  // lives for the whole process
  int line() const;
};

struct LaunchSiteHooks {
  LaunchSite (*capture)();                     // the launching thread's site (cheap: called per launch)
  const char* (*file)(const LaunchSite& site);  // called from any thread
  int (*line)(const LaunchSite& site);          // called from any thread
  void* (*release_gil)();                      // state to hand back to restore_gil, or null
  void (*restore_gil)(void* state);
};

// Called once, before any device work.
void install_launch_site_hooks(const LaunchSiteHooks& hooks);

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
