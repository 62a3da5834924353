#include "aten/resize.h"

#include "aten/op_routes.h"
#include "runtime/device_memory.h"
#include "runtime/streams.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cstring>

namespace simhpu {

void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "simhpu: trying to resize a storage that is not resizable");
  // The old contents are copied on the host, so kernels still writing them
  // must finish; an empty storage (a fresh out= tensor) has nothing to keep.
  if (storage.nbytes() > 0) {
    count_route("resize (growing a storage that holds data)", Route::Synchronized);
    synchronize_device(storage.device().index());
  }
  const c10::DeviceGuard guard(storage.device());
  at::DataPtr fresh = storage.allocator()->allocate(new_bytes);
  const size_t keep = std::min(new_bytes, storage.nbytes());
  if (keep > 0) {
    const c10::DeviceIndex device = storage.device().index();
    std::memcpy(host_address(device, fresh.get()), host_address(device, storage.data()), keep);
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
}

void ensure_storage_fits(const at::Tensor& self) {
  const size_t needed = at::detail::computeStorageNbytes(
      self.sizes(), self.strides(), self.dtype().itemsize(), self.storage_offset());
  if (needed > self.storage().nbytes()) {
    resize_storage_bytes(self.storage(), needed);
  }
}

} // namespace simhpu
