// Sum over a list of dimensions; accumulation is in float (double for double).
// The common case, a contiguous input whose reduced dimensions are adjacent,
// is seen as [outer, reduced, inner] and summed in parallel with vector
// loops; anything else takes a general walk over the input.
#include "generated/kernel_signatures/sum_dims.h"

#include "kernels/cpu_features.h"
#include "kernels/kernel_api.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace simhpu::kernels {
namespace {

constexpr int64_t kGrain = 32768;  // elements per parallel task, at least
// A float accumulator stops growing at 2^24 (adding 1 no longer changes it), so
// no accumulator of the compute type sees more than this many elements; the
// partial sums are added in double.
constexpr int64_t kRunLength = 1 << 16;

// Sum of in[0, n). kLanes independent partial sums: the compiler keeps them
// in several vector registers, so the adds do not wait on each other.
template <typename scalar_t, typename acc_t>
C10_ALWAYS_INLINE acc_t sum_run(const scalar_t* in, int64_t n) {
  constexpr int64_t kLanes = 32;
  acc_t part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int64_t k = 0; k < kLanes; ++k) {
      part[k] += static_cast<acc_t>(in[i + k]);
    }
  }
  acc_t total = 0;
  for (; i < n; ++i) {
    total += static_cast<acc_t>(in[i]);
  }
  for (int64_t k = 0; k < kLanes; ++k) {
    total += part[k];
  }
  return total;
}

#if defined(__x86_64__)
// The same, built for AVX2 (see cpu_features.h).
template <typename scalar_t, typename acc_t>
__attribute__((target("avx2,fma"))) acc_t sum_run_avx2(const scalar_t* in, int64_t n) {
  return sum_run<scalar_t, acc_t>(in, n);
}
#endif

template <typename scalar_t, typename acc_t>
acc_t sum_short(const scalar_t* in, int64_t n) {
#if defined(__x86_64__)
  if (cpu_has_avx2()) {
    return sum_run_avx2<scalar_t, acc_t>(in, n);
  }
#endif
  return sum_run<scalar_t, acc_t>(in, n);
}

template <typename scalar_t, typename acc_t>
acc_t sum_contiguous(const scalar_t* in, int64_t n) {
  if (n <= kRunLength) {
    return sum_short<scalar_t, acc_t>(in, n);
  }
  double total = 0;
  for (int64_t i = 0; i < n; i += kRunLength) {
    total += static_cast<double>(sum_short<scalar_t, acc_t>(in + i, std::min(kRunLength, n - i)));
  }
  return static_cast<acc_t>(total);
}

// out[o] = sum over r of in[o, r] (the reduced elements are adjacent).
template <typename scalar_t, typename acc_t>
void sum_inner(const scalar_t* in, scalar_t* out, int64_t outer, int64_t reduced) {
  if (outer == 1) {
    out[0] = static_cast<scalar_t>(at::parallel_reduce(
        0, reduced, kGrain, acc_t(0),
        [&](int64_t begin, int64_t end, acc_t) { return sum_contiguous<scalar_t, acc_t>(in + begin, end - begin); },
        std::plus<acc_t>()));
    return;
  }
  at::parallel_for(0, outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(reduced, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      out[o] = static_cast<scalar_t>(sum_contiguous<scalar_t, acc_t>(in + o * reduced, reduced));
    }
  });
}

// acc[j] += sum over r in [r0, r1) of in[r, j] for j < width; rows `stride` apart.
template <typename scalar_t, typename acc_t>
void add_rows(const scalar_t* in, int64_t stride, int64_t r0, int64_t r1, acc_t* acc, int64_t width) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {  // four rows a pass: a quarter of the accumulator traffic
    const scalar_t* a = in + r * stride;
    const scalar_t* b = a + stride;
    const scalar_t* c = b + stride;
    const scalar_t* d = c + stride;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) {
      acc[j] += (static_cast<acc_t>(a[j]) + static_cast<acc_t>(b[j])) +
          (static_cast<acc_t>(c[j]) + static_cast<acc_t>(d[j]));
    }
  }
  for (; r < r1; ++r) {
    const scalar_t* a = in + r * stride;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) {
      acc[j] += static_cast<acc_t>(a[j]);
    }
  }
}

// out[o, j] = sum over r of in[o, r, j]. Work is cut into column blocks whose
// accumulators stay in L1 while the rows stream past; when that gives fewer
// tasks than threads, the reduced rows are split too and the parts added after.
template <typename scalar_t, typename acc_t>
void sum_middle(const scalar_t* in, scalar_t* out, int64_t outer, int64_t reduced, int64_t inner) {
  constexpr int64_t kBlock = 2048;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  const int64_t threads = at::get_num_threads();
  const int64_t chunks = (outer * blocks >= threads || reduced < 8 * threads) ? 1 : threads;
  std::vector<acc_t> parts(chunks > 1 ? chunks * outer * inner : 0);
  const int64_t tasks = outer * blocks * chunks;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(reduced / chunks * kBlock, 1));
  at::parallel_for(0, tasks, grain, [&](int64_t b, int64_t e) {
    acc_t acc[kBlock];
    double total[kBlock];
    for (int64_t task = b; task < e; ++task) {
      const int64_t chunk = task % chunks;
      const int64_t block = task / chunks % blocks;
      const int64_t o = task / chunks / blocks;
      const int64_t j0 = block * kBlock;
      const int64_t width = std::min(kBlock, inner - j0);
      const int64_t r0 = reduced * chunk / chunks;
      const int64_t r1 = reduced * (chunk + 1) / chunks;
      // Rows are added kRunLength at a time in the compute type, then in double.
      std::fill(total, total + width, 0.0);
      for (int64_t r = r0; r < r1; r += kRunLength) {
        std::fill(acc, acc + width, acc_t(0));
        add_rows<scalar_t, acc_t>(in + o * reduced * inner + j0, inner, r, std::min(r1, r + kRunLength), acc, width);
        for (int64_t j = 0; j < width; ++j) {
          total[j] += static_cast<double>(acc[j]);
        }
      }
      std::copy(total, total + width, acc);
      if (chunks == 1) {
        scalar_t* dst = out + o * inner + j0;
        for (int64_t j = 0; j < width; ++j) {
          dst[j] = static_cast<scalar_t>(acc[j]);
        }
      } else {
        std::copy(acc, acc + width, parts.data() + (chunk * outer + o) * inner + j0);
      }
    }
  });
  if (chunks > 1) {
    at::parallel_for(0, outer * inner, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        acc_t total = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          total += parts[c * outer * inner + i];
        }
        out[i] = static_cast<scalar_t>(total);
      }
    });
  }
}

// out[o, j] = sum over r of in[o, r, j], dense both.
template <typename scalar_t, typename acc_t>
void sum_dense(const DeviceTensor& self, const DeviceTensor& out, int64_t outer, int64_t middle, int64_t inner) {
  const scalar_t* in = self.data_as<const scalar_t>();
  scalar_t* o = out.data_as<scalar_t>();
  if (inner == 1) {
    sum_inner<scalar_t, acc_t>(in, o, outer, middle);
  } else {
    sum_middle<scalar_t, acc_t>(in, o, outer, middle, inner);
  }
}

// The same, accumulated in the compute type (opmath: float for float).
void sum_outer_reduced_inner(const DeviceTensor& self, const DeviceTensor& out, int64_t outer, int64_t middle,
                             int64_t inner) {
  SIMHPU_DISPATCH_FLOATING(self.dtype, "sum_dims", [&] {
    sum_dense<scalar_t, at::opmath_type<scalar_t>>(self, out, outer, middle, inner);
  });
}

} // namespace

void sum_dims(const DeviceTensor& self, c10::IntArrayRef dim, bool keepdim, const Out<DeviceTensor>& out) {
  const int64_t dims = self.dim();
  if (dims == 0) {  // a 0-dim tensor "reduced" over dimension 0 or -1 is itself
    SIMHPU_DISPATCH_FLOATING(self.dtype, "sum_dims", [&] {
      *out.data_as<scalar_t>() = *self.data_as<const scalar_t>();
    });
    return;
  }
  std::vector<bool> reduced(dims, dim.empty());
  for (int64_t d : dim) {
    reduced[d < 0 ? d + dims : d] = true;
  }
  const auto first = std::find(reduced.begin(), reduced.end(), true);
  const auto last = std::find(reduced.rbegin(), reduced.rend(), true);
  const bool adjacent = first != reduced.end() && std::find(first, last.base(), false) == last.base();
  if (self.is_contiguous() && out.is_contiguous() && adjacent && self.numel() > 0) {
    const int64_t lo = first - reduced.begin();
    const int64_t hi = last.base() - reduced.begin();  // one past the last reduced dimension
    int64_t outer = 1, middle = 1, inner = 1;
    for (int64_t d = 0; d < dims; ++d) {
      (d < lo ? outer : d < hi ? middle : inner) *= self.sizes[d];
    }
    sum_outer_reduced_inner(self, out, outer, middle, inner);
    return;
  }

  // Output stride of each input dimension: 0 where the dimension is reduced.
  std::vector<int64_t> out_stride(dims, 0);
  for (int64_t d = 0, od = 0; d < dims; ++d) {
    if (reduced[d]) {
      od += keepdim ? 1 : 0;
      continue;
    }
    out_stride[d] = out.strides[od++];
  }
  SIMHPU_DISPATCH_FLOATING(self.dtype, "sum_dims", [&] {
    using acc_t = double;  // the slow path: no run of the compute type can saturate
    const int64_t out_n = out.numel();
    std::vector<acc_t> acc(out_n, acc_t(0));
    const scalar_t* in = self.data_as<const scalar_t>();
    std::vector<int64_t> index(dims, 0);
    const int64_t n = self.numel();
    int64_t in_off = 0, out_off = 0;
    for (int64_t i = 0; i < n; ++i) {
      acc[out_off] += acc_t(in[in_off]);
      for (int64_t d = dims - 1; d >= 0; --d) {  // advance the N-d index
        if (++index[d] < self.sizes[d]) {
          in_off += self.strides[d];
          out_off += out_stride[d];
          break;
        }
        in_off -= (self.sizes[d] - 1) * self.strides[d];
        out_off -= (self.sizes[d] - 1) * out_stride[d];
        index[d] = 0;
      }
    }
    // The output is freshly allocated and contiguous, so acc maps onto it 1:1.
    scalar_t* o = out.data_as<scalar_t>();
    for (int64_t i = 0; i < out_n; ++i) {
      o[i] = static_cast<scalar_t>(acc[i]);
    }
  });
}
SIMHPU_KERNEL(sum_dims);

} // namespace simhpu::kernels
