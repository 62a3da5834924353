// index_select and gather. An index out of range is found by the kernel, as on
// a real device, so it fails asynchronously (like CUDA's device-side asserts)
// and is reported at the next synchronising call.
#include "generated/kernel_signatures/gather.h"
#include "generated/kernel_signatures/index_select.h"
#include "kernels/kernel_api.h"

#include <c10/core/WrapDimMinimal.h>

#include <algorithm>
#include <cstring>

namespace simhpu::kernels {
namespace {

int64_t index_at(const DeviceTensor& index, int64_t i) {
  return index.dtype == at::kLong ? index.data_as<const int64_t>()[i]
                                  : static_cast<int64_t>(index.data_as<const int32_t>()[i]);
}

// `cpu_words`: how the CPU's kernel of the op starts the message (index_select:
// "index out of range in self"), so what matches the CPU's error matches this one.
void check_in_range(int64_t idx, int64_t dim, int64_t size, const char* cpu_words = "") {
  TORCH_CHECK_INDEX(idx >= 0 && idx < size, cpu_words, "index ", idx, " is out of bounds for dimension ", dim,
                    " with size ", size);
}

} // namespace

// out = self.index_select(dim, index); self, index and out contiguous.
void index_select(const DeviceTensor& self, int64_t dim, const DeviceTensor& index, const Out<DeviceTensor>& out) {
  const int64_t ndim = self.dim();
  const int64_t d = ndim == 0 ? 0 : c10::maybe_wrap_dim(dim, ndim);
  const int64_t size = ndim == 0 ? 1 : self.sizes[d];
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= self.sizes[i];
  for (int64_t i = d + 1; i < ndim; ++i) inner *= self.sizes[i];
  const size_t item = c10::elementSize(self.dtype);
  const int64_t count = index.numel();
  const char* src = static_cast<const char*>(self.data);
  char* dst = static_cast<char*>(out.data);
  for (int64_t j = 0; j < count; ++j) {
    check_in_range(index_at(index, j), d, size, "index out of range in self: ");
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < count; ++j) {
      const int64_t idx = index_at(index, j);
      std::memcpy(dst + ((o * count + j) * inner) * item, src + ((o * size + idx) * inner) * item, inner * item);
    }
  }
}
SIMHPU_KERNEL(index_select);

// out[..., i_dim, ...] = self[..., index[..., i_dim, ...], ...]; all contiguous. A 0-d self or index
// gathers as a 1-d tensor of one element, as ATen's shape check has it (scalar index into a vector).
void gather(const DeviceTensor& self, int64_t dim, const DeviceTensor& index, bool sparse_grad,
            const Out<DeviceTensor>& out) {
  (void)sparse_grad;
  const int64_t ndim = std::max<int64_t>(index.dim(), 1);
  TORCH_CHECK(std::max<int64_t>(self.dim(), 1) == ndim, "index has ", index.dim(), " dimensions but self has ",
              self.dim());
  const auto self_size = [&](int64_t i) { return self.dim() == 0 ? int64_t{1} : self.sizes[i]; };
  const auto index_size = [&](int64_t i) { return index.dim() == 0 ? int64_t{1} : index.sizes[i]; };
  const int64_t d = c10::maybe_wrap_dim(dim, ndim);
  const size_t item = c10::elementSize(self.dtype);
  c10::SmallVector<int64_t, 6> self_strides(ndim, 1);
  for (int64_t i = ndim - 2; i >= 0; --i) self_strides[i] = self_strides[i + 1] * self_size(i + 1);
  c10::SmallVector<int64_t, 6> coord(ndim, 0);
  const int64_t n = index.numel();
  for (int64_t linear = 0; linear < n; ++linear) {
    const int64_t idx = index_at(index, linear);
    check_in_range(idx, d, self_size(d));
    int64_t offset = 0;
    for (int64_t i = 0; i < ndim; ++i) {
      offset += (i == d ? idx : coord[i]) * self_strides[i];
    }
    std::memcpy(static_cast<char*>(out.data) + linear * item, static_cast<const char*>(self.data) + offset * item,
                item);
    for (int64_t i = ndim - 1; i >= 0; --i) {  // next coordinate of index/out
      if (++coord[i] < index_size(i)) break;
      coord[i] = 0;
    }
  }
}
SIMHPU_KERNEL(gather);

} // namespace simhpu::kernels
