#include "aten/resize.h"

#include "runtime/observers.h"
#include "runtime/streams.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>

namespace simhpu {
namespace {

// `bytes` bytes of `storage` as a Byte tensor, for copying between storages.
at::Tensor leading_bytes(c10::Storage storage, size_t bytes) {
  at::Tensor view = at::empty({0}, at::TensorOptions().dtype(at::kByte).device(storage.device()));
  return view.set_(std::move(storage), 0, {static_cast<int64_t>(bytes)}, {1});
}

} // namespace

// As CUDA resizes a storage: the host never waits. A new block is taken from
// the allocator; the bytes kept are copied on the current stream, after the
// work queued on it; and the old block is freed as the program sees it (its
// next use on the allocation stream is ordered after what that stream queued),
// while its memory stays held until every stream has run what it queued, since
// those launches reach it by address once the storage no longer holds it.
// This is FSDP's free of unsharded parameters, every layer, every step.
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "simhpu: trying to resize a storage that is not resizable");
  const c10::Device device = storage.device();
  const c10::DeviceGuard guard(device);
  const size_t old_bytes = storage.nbytes();
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  at::DataPtr old = impl->set_data_ptr(storage.allocator()->allocate(new_bytes));
  impl->set_nbytes(new_bytes);
  if (old.get() == nullptr) return;  // nothing was held (an empty storage, a fresh out= tensor)
  observers::on_free_held(device.index(), old.get());
  const c10::Storage retired(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), old_bytes, std::move(old), storage.allocator(), /*resizable=*/false));
  const size_t keep = std::min(new_bytes, old_bytes);
  if (keep > 0) {
    leading_bytes(storage, keep).copy_(leading_bytes(retired, keep));
  }
  hold_until_streams_pass(device.index(), retired);
}

void ensure_storage_fits(const at::Tensor& self) {
  const size_t needed = at::detail::computeStorageNbytes(
      self.sizes(), self.strides(), self.dtype().itemsize(), self.storage_offset());
  if (needed > self.storage().nbytes()) {
    resize_storage_bytes(self.storage(), needed);
  }
}

} // namespace simhpu
