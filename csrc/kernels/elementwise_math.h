#pragma once
// The functions `elementwise:` expressions may call (see codegen/model/elementwise.py),
// on the compute type of the element (float for half and bfloat16).
//
// exp, log and log1p on float are written here rather than taken from libm:
// libm's are calls the compiler cannot vectorise, these are straight-line
// code it can (elementwise.h asks it to, with `omp simd`). They are the
// classic Cephes range reductions and polynomials, within 2 ulp of libm over
// the whole float range, with libm's results at 0, infinities and NaN.
// Everything here is always inlined: in a large translation unit the
// compiler's inlining budget runs out, and a call in a loop stops vectorising.
#include <c10/macros/Macros.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace simhpu::ew {

namespace vmath {

C10_ALWAYS_INLINE float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

C10_ALWAYS_INLINE uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

C10_ALWAYS_INLINE float exp(float x) {
  // exp(x) = 2^n * exp(r), x = n ln2 + r, |r| <= ln2 / 2.
  const float clamped = x != x ? 0.0f : std::min(std::max(x, -104.0f), 88.8f);
  // Round to nearest by adding and taking away 1.5 * 2^23 (nearbyint is a call before SSE4.1).
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  // 2^n in two halves, so n down to -150 (subnormal results) stays in range.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t half = ni / 2;
  const float scale_a = from_bits(static_cast<uint32_t>(half + 127) << 23);
  const float scale_b = from_bits(static_cast<uint32_t>(ni - half + 127) << 23);
  float result = er * scale_a * scale_b;
  result = x >= 88.72283935546875f ? std::numeric_limits<float>::infinity() : result;
  result = x < -103.97208f ? 0.0f : result;
  return x != x ? x : result;
}

C10_ALWAYS_INLINE float log(float x) {
  // x = 2^e * m with m in [sqrt(1/2), sqrt(2)); log x = e ln2 + log m.
  const uint32_t bits = to_bits(x);
  const bool subnormal = bits < 0x00800000u;
  const float normal = subnormal ? x * 16777216.0f : x;  // 2^24: subnormals into range
  const uint32_t nbits = to_bits(normal);
  int32_t e = static_cast<int32_t>((nbits >> 23) & 0xff) - 126 - (subnormal ? 24 : 0);
  float m = from_bits((nbits & 0x007fffffu) | 0x3f000000u);  // in [0.5, 1)
  const bool small = m < 0.707106781186547524f;
  e = small ? e - 1 : e;
  m = small ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  const float fe = static_cast<float>(e);
  float y = p * m * z;
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  float result = m + y + fe * 0.693359375f;
  result = x == 0.0f ? -std::numeric_limits<float>::infinity() : result;
  result = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : result;
  result = x == std::numeric_limits<float>::infinity() ? x : result;
  return x != x ? x : result;
}

C10_ALWAYS_INLINE float log1p(float x) {
  // log(u) with u = 1 + x, corrected for the rounding of u: exact for tiny x.
  const float u = 1.0f + x;
  const float d = u - 1.0f;
  const float corrected = vmath::log(u) * (x / d);
  const float result = d == 0.0f ? x : corrected;
  return u == std::numeric_limits<float>::infinity() ? u : result;
}

} // namespace vmath

template <typename T> C10_ALWAYS_INLINE T abs(T x) { return std::abs(x); }
template <typename T> C10_ALWAYS_INLINE T exp(T x) { return std::exp(x); }
C10_ALWAYS_INLINE float exp(float x) { return vmath::exp(x); }
template <typename T> C10_ALWAYS_INLINE T expm1(T x) { return std::expm1(x); }
template <typename T> C10_ALWAYS_INLINE T log(T x) { return std::log(x); }
C10_ALWAYS_INLINE float log(float x) { return vmath::log(x); }
template <typename T> C10_ALWAYS_INLINE T log1p(T x) { return std::log1p(x); }
C10_ALWAYS_INLINE float log1p(float x) { return vmath::log1p(x); }
template <typename T> C10_ALWAYS_INLINE T sqrt(T x) { return std::sqrt(x); }
template <typename T> C10_ALWAYS_INLINE T rsqrt(T x) { return T(1) / std::sqrt(x); }
template <typename T> C10_ALWAYS_INLINE T sin(T x) { return std::sin(x); }
template <typename T> C10_ALWAYS_INLINE T cos(T x) { return std::cos(x); }
template <typename T> C10_ALWAYS_INLINE T tanh(T x) { return std::tanh(x); }
template <typename T> C10_ALWAYS_INLINE T erf(T x) { return std::erf(x); }
template <typename T> C10_ALWAYS_INLINE T sigmoid(T x) { return T(1) / (T(1) + exp(-x)); }
template <typename T> C10_ALWAYS_INLINE T relu(T x) { return x > T(0) ? x : T(0); }
template <typename T, typename U> C10_ALWAYS_INLINE T pow(T x, U y) { return std::pow(x, static_cast<T>(y)); }
template <typename T, typename U> C10_ALWAYS_INLINE T maximum(T a, U b) { return std::max(a, static_cast<T>(b)); }
template <typename T, typename U> C10_ALWAYS_INLINE T minimum(T a, U b) { return std::min(a, static_cast<T>(b)); }
template <typename T, typename U> C10_ALWAYS_INLINE T where(bool c, T a, U b) { return c ? a : static_cast<T>(b); }
template <typename T, typename U, typename V> C10_ALWAYS_INLINE T clamp(T x, U lo, V hi) {
  return std::min(std::max(x, static_cast<T>(lo)), static_cast<T>(hi));
}

} // namespace simhpu::ew
