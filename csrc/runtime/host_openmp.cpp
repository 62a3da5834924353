#include "runtime/host_openmp.h"

#include <omp.h>

namespace simhpu {

void release_idle_host_openmp_team_now_and_then(size_t kernels_launched) {
  thread_local size_t since_release = 0;
  since_release += kernels_launched;
  if (since_release < kKernelsPerRelease) {
    return;
  }
  since_release = 0;
  // libgomp frees the calling thread's pool only, and refuses inside a parallel region.
  omp_pause_resource_all(omp_pause_soft);
}

} // namespace simhpu
