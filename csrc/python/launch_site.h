#pragma once

#include <map>
#include <string>
#include <utility>

namespace simhpu {

// Launches from `wrapper_file` (a compiled graph's generated module) at one of
// `lines` are reported at the user's (file, line) it maps to
// (torch_simhpu/_inductor/sources.py).
void map_compiled_sources(const std::string& wrapper_file, const std::map<int, std::pair<std::string, int>>& lines);

// Gives the runtime its launch-site and GIL hooks (runtime/launch_site.h).
void install_python_launch_sites();

} // namespace simhpu
