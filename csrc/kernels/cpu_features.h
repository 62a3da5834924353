#pragma once
// What the host CPU offers beyond baseline x86-64. Kernels with a hot loop
// build it a second time with __attribute__((target("avx2,fma"))) and pick
// that copy at run time, so the wheel still runs on any x86-64.

namespace simhpu::kernels {

#if defined(__x86_64__)
inline bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

} // namespace simhpu::kernels
