#pragma once
// The functions `elementwise:` expressions may call (see codegen/elementwise.py),
// on the compute type of the element (float for half and bfloat16).
#include <algorithm>
#include <cmath>

namespace simhpu::ew {

template <typename T> inline T abs(T x) { return std::abs(x); }
template <typename T> inline T exp(T x) { return std::exp(x); }
template <typename T> inline T expm1(T x) { return std::expm1(x); }
template <typename T> inline T log(T x) { return std::log(x); }
template <typename T> inline T log1p(T x) { return std::log1p(x); }
template <typename T> inline T sqrt(T x) { return std::sqrt(x); }
template <typename T> inline T rsqrt(T x) { return T(1) / std::sqrt(x); }
template <typename T> inline T sin(T x) { return std::sin(x); }
template <typename T> inline T cos(T x) { return std::cos(x); }
template <typename T> inline T tanh(T x) { return std::tanh(x); }
template <typename T> inline T erf(T x) { return std::erf(x); }
template <typename T> inline T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }
template <typename T> inline T relu(T x) { return x > T(0) ? x : T(0); }
template <typename T, typename U> inline T pow(T x, U y) { return std::pow(x, static_cast<T>(y)); }
template <typename T, typename U> inline T maximum(T a, U b) { return std::max(a, static_cast<T>(b)); }
template <typename T, typename U> inline T minimum(T a, U b) { return std::min(a, static_cast<T>(b)); }
template <typename T, typename U> inline T where(bool c, T a, U b) { return c ? a : static_cast<T>(b); }
template <typename T, typename U, typename V> inline T clamp(T x, U lo, V hi) {
  return std::min(std::max(x, static_cast<T>(lo)), static_cast<T>(hi));
}

} // namespace simhpu::ew
