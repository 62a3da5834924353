#include "runtime/build_info.h"

#include <cstring>

namespace simhpu {

BuildInfo runtime_build() {
  return SIMHPU_THIS_BUILD;
}

std::string build_mismatch(const BuildInfo& built, const std::string& what) {
  const BuildInfo mine = runtime_build();
  if (std::strcmp(built.simhpu_version, mine.simhpu_version) == 0 && built.torch_major == mine.torch_major &&
      built.torch_minor == mine.torch_minor) {
    return "";
  }
  auto describe = [](const BuildInfo& b) {
    return std::string("torch_simhpu ") + b.simhpu_version + " with torch " + std::to_string(b.torch_major) + "." +
        std::to_string(b.torch_minor);
  };
  return what + " was built against " + describe(built) + ", but this process runs " + describe(mine) +
      "; rebuild the package that provides it against the installed torch_simhpu "
      "(pip install --force-reinstall --no-build-isolation it from source)";
}

} // namespace simhpu
