#include "runtime/build_info.h"

#include <cstring>

namespace simhpu {

// Written by setup.py into build/sdk_stamp/ (its own translation unit, so a
// header edit recompiles only it); the hash torch_simhpu/sdk_stamp.h holds.
const char* runtime_sdk_stamp();

BuildInfo runtime_build() {
  BuildInfo mine = SIMHPU_THIS_BUILD;
  mine.sdk_stamp = runtime_sdk_stamp();
  return mine;
}

std::string build_mismatch(const BuildInfo& built, const std::string& what) {
  const BuildInfo mine = runtime_build();
  const bool same_release = std::strcmp(built.simhpu_version, mine.simhpu_version) == 0 &&
      built.torch_major == mine.torch_major && built.torch_minor == mine.torch_minor;
  // An empty stamp: code of the runtime's own library.
  const bool same_headers = built.sdk_stamp[0] == '\0' || std::strcmp(built.sdk_stamp, mine.sdk_stamp) == 0;
  if (same_release && same_headers) {
    return "";
  }
  auto describe = [](const BuildInfo& b) {
    return std::string("torch_simhpu ") + b.simhpu_version + " with torch " + std::to_string(b.torch_major) + "." +
        std::to_string(b.torch_minor) + " (SDK headers " + std::string(b.sdk_stamp).substr(0, 12) + ")";
  };
  return what + " was built against " + describe(built) + ", but this process runs " + describe(mine) +
      "; rebuild the package that provides it against the installed torch_simhpu "
      "(python setup.py bdist_wheel && pip install --no-deps dist/*.whl in its folder)";
}

} // namespace simhpu
