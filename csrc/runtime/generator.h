#pragma once
// The random number generator of a simhpu device: one default generator per
// device (seeded by torch.simhpu.manual_seed, independent of the CPU's), and
// torch.Generator(device="simhpu") for private streams of numbers.
//
// It is counter-based, as CUDA's Philox generator is: its whole state is a
// seed and an offset (get_state() is CUDA's 16 bytes: seed, then offset, both
// little-endian uint64), each random launch takes the numbers at the current
// offset and moves the offset past them, and any offset can be set directly.
// That is what DTensor's sharded random initialisation relies on: it moves the
// offset so that each shard draws its own part of the stream.
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

  // One launch's numbers: the seed of the CPU engine its kernel draws from,
  // made by Philox4x32-10 from (seed, offset); the offset then moves on by
  // `numbers` rounded up to a multiple of 4 (Philox makes 4 per counter).
  // Hold mutex_ while calling.
  uint64_t take_launch_seed(uint64_t numbers);

  static constexpr size_t kStateBytes = 16;

 private:
  SimhpuGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

// The seed for a kernel drawing `numbers` random numbers from `generator` (a
// simhpu generator), taken under its lock.
uint64_t take_launch_seed(const at::Generator& generator, uint64_t numbers);

} // namespace simhpu
