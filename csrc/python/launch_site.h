#pragma once

namespace simhpu {

// Gives the runtime its launch-site and GIL hooks (runtime/launch_site.h).
void install_python_launch_sites();

} // namespace simhpu
