// RMS normalisation over the last dimension, and its backward.
//   rstd = 1 / sqrt(mean(x^2) + eps)      (one per row, shape [..., 1])
//   y    = x * rstd * gamma
// Inputs are contiguous (the YAML entry asks the adapter for that).
#include "generated/kernel_signatures/rms_norm.h"
#include "generated/kernel_signatures/rms_norm_backward.h"
#include "kernels/kernel_api.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

namespace simhpu::kernels {

void rms_norm(const DeviceTensor& x, const DeviceTensor& gamma, double eps,
              const Out<DeviceTensor>& y, const Out<DeviceTensor>& rstd) {
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  // One statistic per row, rows of no elements included: their mean of squares is
  // 0/0, so rstd is NaN there, as torch's mean over an empty dimension is.
  const int64_t rows = rstd.numel();
  SIMHPU_DISPATCH_FLOATING(x.dtype, "rms_norm", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.data_as<const scalar_t>();
    const scalar_t* gp = gamma.data_as<const scalar_t>();
    scalar_t* yp = y.data_as<scalar_t>();
    scalar_t* rp = rstd.data_as<scalar_t>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* row = xp + r * cols;
        acc_t sum_sq = 0;
        for (int64_t c = 0; c < cols; ++c) {
          sum_sq += acc_t(row[c]) * acc_t(row[c]);
        }
        const acc_t inv = acc_t(1) / std::sqrt(sum_sq / acc_t(cols) + acc_t(eps));
        rp[r] = static_cast<scalar_t>(inv);
        for (int64_t c = 0; c < cols; ++c) {
          yp[r * cols + c] = static_cast<scalar_t>(acc_t(row[c]) * inv * acc_t(gp[c]));
        }
      }
    });
  });
}
SIMHPU_KERNEL(rms_norm);

//   dx     = rstd * (dy * gamma) - x * rstd^3 * mean(dy * gamma * x)
//   dgamma = sum over rows of dy * x * rstd
void rms_norm_backward(const DeviceTensor& dy, const DeviceTensor& x, const DeviceTensor& gamma,
                       const DeviceTensor& rstd, const Out<DeviceTensor>& dx, const Out<DeviceTensor>& dgamma) {
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  SIMHPU_DISPATCH_FLOATING(x.dtype, "rms_norm_backward", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* dyp = dy.data_as<const scalar_t>();
    const scalar_t* xp = x.data_as<const scalar_t>();
    const scalar_t* gp = gamma.data_as<const scalar_t>();
    const scalar_t* rp = rstd.data_as<const scalar_t>();
    scalar_t* dxp = dx.data_as<scalar_t>();
    scalar_t* dgp = dgamma.data_as<scalar_t>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t base = r * cols;
        const acc_t inv = rp[r];
        acc_t dot = 0;
        for (int64_t c = 0; c < cols; ++c) {
          dot += acc_t(dyp[base + c]) * acc_t(gp[c]) * acc_t(xp[base + c]);
        }
        const acc_t k = inv * inv * inv * dot / acc_t(cols);
        for (int64_t c = 0; c < cols; ++c) {
          dxp[base + c] = static_cast<scalar_t>(inv * acc_t(dyp[base + c]) * acc_t(gp[c]) - acc_t(xp[base + c]) * k);
        }
      }
    });
    at::parallel_for(0, cols, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        acc_t sum = 0;
        for (int64_t r = 0; r < rows; ++r) {
          sum += acc_t(dyp[r * cols + c]) * acc_t(xp[r * cols + c]) * acc_t(rp[r]);
        }
        dgp[c] = static_cast<scalar_t>(sum);
      }
    });
  });
}
SIMHPU_KERNEL(rms_norm_backward);

} // namespace simhpu::kernels
