#pragma once
// One loop for every elementwise kernel: inputs are broadcast to the output's
// shape; contiguous operands take a flat, parallel fast path, anything else a
// strided walk over the output's dimensions.
#include "kernels/cpu_features.h"
#include "runtime/kernel_arg.h"

#include <ATen/Parallel.h>
#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace simhpu::kernels {

// Strides of `in` seen with `out_sizes` (right-aligned; broadcast dims get 0).
inline c10::SmallVector<int64_t, 6> broadcast_strides(const DeviceTensor& in, c10::IntArrayRef out_sizes) {
  const int64_t out_dim = static_cast<int64_t>(out_sizes.size());
  c10::SmallVector<int64_t, 6> strides(out_dim, 0);
  for (int64_t d = 0; d < in.dim(); ++d) {
    const int64_t od = out_dim - in.dim() + d;
    strides[od] = in.sizes[d] == 1 ? 0 : in.strides[d];
  }
  return strides;
}

constexpr int64_t kElementwiseGrain = 32768;

// For the lambdas handed to elementwise(): in a large translation unit the
// compiler may otherwise leave them as calls, and a call stops vectorisation.
#define SIMHPU_INLINE_LAMBDA __attribute__((always_inline))

namespace detail {
template <typename T, size_t N, typename Fn, size_t... K>
inline T apply_at(Fn& fn, const std::array<const T*, N>& ptr, const std::array<int64_t, N>& off,
                  std::index_sequence<K...>) {
  return static_cast<T>(fn(ptr[K][off[K]]...));
}

// The result as T. bfloat16 rounds to nearest even as c10 does, but without a
// branch for NaN, so loops that produce bfloat16 still vectorise.
template <typename T, typename Acc>
C10_ALWAYS_INLINE T result_as(Acc value) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    uint32_t bits;
    const float f = static_cast<float>(value);
    std::memcpy(&bits, &f, sizeof bits);
    const uint32_t rounded = (bits + ((bits >> 16) & 1u) + 0x7fffu) >> 16;
    return c10::BFloat16(static_cast<uint16_t>(f != f ? 0x7fc0u : rounded), c10::BFloat16::from_bits());
  } else {
    return static_cast<T>(value);
  }
}

// The contiguous case, written so the compiler vectorises it: one index,
// pointers in locals, `omp simd` (an in-place op, out == an input, is still
// safe: each element is read before it is written, at the same index).
template <typename T, size_t N, typename Fn, size_t... K>
C10_ALWAYS_INLINE void contiguous_range(T* out, const std::array<const T*, N>& in, Fn& fn, int64_t begin,
                                        int64_t end, std::index_sequence<K...>) {
  const std::array<const T*, N> p = in;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    out[i] = result_as<T>(fn(p[K][i]...));
  }
}

// The same loop built for AVX2 and FMA: twice the vector width. The wheel
// still runs on any x86-64; elementwise() picks this where the CPU has them.
#if defined(__x86_64__)
template <typename T, size_t N, typename Fn, size_t... K>
__attribute__((target("avx2,fma"))) void contiguous_range_avx2(T* out, const std::array<const T*, N>& in, Fn& fn,
                                                              int64_t begin, int64_t end, std::index_sequence<K...> seq) {
  contiguous_range<T>(out, in, fn, begin, end, seq);
}
#endif
} // namespace detail

// out[i] = fn(inputs[i]...) for every element, all operands of dtype T.
template <typename T, typename Fn, typename... Inputs>
void elementwise(const DeviceTensor& out, Fn fn, const Inputs&... inputs) {
  constexpr size_t N = sizeof...(Inputs);
  using Seq = std::make_index_sequence<N>;
  const int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  T* o = out.data_as<T>();
  const std::array<const T*, N> in_ptr{inputs.template data_as<const T>()...};

  if (out.is_contiguous() && ((inputs.is_contiguous() && inputs.numel() == n) && ...)) {
    at::parallel_for(0, n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__)
      if (cpu_has_avx2()) {
        return detail::contiguous_range_avx2<T>(o, in_ptr, fn, begin, end, Seq{});
      }
#endif
      detail::contiguous_range<T>(o, in_ptr, fn, begin, end, Seq{});
    });
    return;
  }

  // Strided walk: one row of the innermost dimension at a time.
  const int64_t dims = out.dim();
  const std::array<c10::SmallVector<int64_t, 6>, N> in_strides{broadcast_strides(inputs, out.sizes)...};
  const int64_t inner = dims == 0 ? 1 : out.sizes[dims - 1];
  const int64_t out_step = dims == 0 ? 0 : out.strides[dims - 1];
  std::array<int64_t, N> in_step{};
  for (size_t k = 0; k < N; ++k) {
    in_step[k] = dims == 0 ? 0 : in_strides[k][dims - 1];
  }
  const int64_t rows = n / inner;
  at::parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t out_off = 0;
      std::array<int64_t, N> off{};
      int64_t rest = row;
      for (int64_t d = dims - 2; d >= 0; --d) {
        const int64_t i = rest % out.sizes[d];
        rest /= out.sizes[d];
        out_off += i * out.strides[d];
        for (size_t k = 0; k < N; ++k) {
          off[k] += i * in_strides[k][d];
        }
      }
      for (int64_t j = 0; j < inner; ++j) {
        o[out_off] = detail::apply_at<T>(fn, in_ptr, off, Seq{});
        out_off += out_step;
        for (size_t k = 0; k < N; ++k) {
          off[k] += in_step[k];
        }
      }
    }
  });
}

} // namespace simhpu::kernels
