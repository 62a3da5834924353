#include "runtime/launch_site.h"

namespace simhpu {
namespace {

LaunchSiteHooks hooks{};  // set once at module init, before any worker thread starts

} // namespace

void install_launch_site_hooks(const LaunchSiteHooks& installed) {
  hooks = installed;
}

const char* LaunchSite::file() const {
  return known() && hooks.file != nullptr ? hooks.file(*this) : nullptr;
}

int LaunchSite::line() const {
  return known() && hooks.line != nullptr ? hooks.line(*this) : 0;
}

LaunchSite capture_launch_site() {
  return hooks.capture != nullptr ? hooks.capture() : LaunchSite{};
}

GilRelease::GilRelease() {
  if (hooks.release_gil != nullptr) {
    saved_ = hooks.release_gil();
  }
}

GilRelease::~GilRelease() {
  if (saved_ != nullptr) {
    hooks.restore_gil(saved_);
  }
}

} // namespace simhpu
