#include "runtime/generator.h"

#include "runtime/device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>

#include <array>
#include <mutex>

namespace simhpu {

// The numbers come from a CPU engine (the device's kernels run on the host);
// the generator itself belongs to the device, so it is seeded and saved apart
// from the CPU's default generator.
SimhpuGenerator::SimhpuGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(device_of(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      engine_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

void SimhpuGenerator::set_current_seed(uint64_t seed) { engine_.set_current_seed(seed); }
void SimhpuGenerator::set_offset(uint64_t offset) { engine_.set_offset(offset); }
uint64_t SimhpuGenerator::get_offset() const { return engine_.get_offset(); }
uint64_t SimhpuGenerator::current_seed() const { return engine_.current_seed(); }
uint64_t SimhpuGenerator::seed() { return engine_.seed(); }
void SimhpuGenerator::set_state(const c10::TensorImpl& new_state) {
  auto impl = c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(const_cast<c10::TensorImpl*>(&new_state));
  engine_.set_state(at::Tensor(std::move(impl)));
}
c10::intrusive_ptr<c10::TensorImpl> SimhpuGenerator::get_state() const {
  return engine_.get_state().getIntrusivePtr();
}

SimhpuGenerator* SimhpuGenerator::clone_impl() const {
  auto* copy = new SimhpuGenerator(device_.index());
  copy->engine_ = engine_.clone();
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  check_device_index(device, "default_generator");
  static std::array<at::Generator, 64>* generators = new std::array<at::Generator, 64>();
  static std::once_flag once;
  std::call_once(once, [] {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      (*generators)[d] = at::make_generator<SimhpuGenerator>(d);
    }
  });
  return (*generators)[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  check_device_index(device, "Generator");
  return at::make_generator<SimhpuGenerator>(device);
}

} // namespace simhpu
