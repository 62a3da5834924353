#pragma once
// The random number generator of a simhpu device: one default generator per
// device (seeded by torch.simhpu.manual_seed, independent of the CPU's), and
// torch.Generator(device="simhpu") for private streams of numbers.
#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

namespace simhpu {

class SimhpuGenerator final : public c10::GeneratorImpl {
 public:
  explicit SimhpuGenerator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The sequence the device draws from (hold mutex_ while drawing).
  const at::Generator& engine() const { return engine_; }

 private:
  SimhpuGenerator* clone_impl() const override;
  at::Generator engine_;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

} // namespace simhpu
