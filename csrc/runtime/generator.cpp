#include "runtime/generator.h"

#include "runtime/device.h"

#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/GeneratorImpl.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

namespace simhpu {
namespace {

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011): a counter and a key in, four 32-bit words out.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * counter[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<uint32_t>(p0)};
    key = {key[0] + kWeyl0, key[1] + kWeyl1};
  }
  return counter;
}

uint64_t low_then_high(uint32_t low, uint32_t high) { return (static_cast<uint64_t>(high) << 32) | low; }

} // namespace

SimhpuGenerator::SimhpuGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(device_of(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)), seed_(seed) {}

void SimhpuGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

void SimhpuGenerator::set_offset(uint64_t offset) {
  TORCH_CHECK(offset % 4 == 0, "simhpu generator: set_offset: the offset must be a multiple of 4 ",
              "(Philox makes 4 numbers per counter), got ", offset);
  offset_ = offset;
}

uint64_t SimhpuGenerator::get_offset() const { return offset_; }
uint64_t SimhpuGenerator::current_seed() const { return seed_; }

uint64_t SimhpuGenerator::seed() {
  const uint64_t random = c10::detail::getNonDeterministicRandom(false);
  set_current_seed(random);
  return random;
}

void SimhpuGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && new_state.device().is_cpu(),
              "simhpu generator: set_state: expected a CPU torch.uint8 tensor (from get_state()), got ",
              new_state.dtype(), " on ", new_state.device());
  TORCH_CHECK(new_state.numel() == static_cast<int64_t>(kStateBytes),
              "simhpu generator: set_state: expected ", kStateBytes,
              " bytes (seed and offset, as CUDA's Philox state), got ", new_state.numel());
  TORCH_CHECK(new_state.is_contiguous(), "simhpu generator: set_state: the state tensor must be contiguous");
  uint64_t seed = 0, offset = 0;
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed, bytes, 8);
  std::memcpy(&offset, bytes + 8, 8);
  TORCH_CHECK(offset % 4 == 0, "simhpu generator: set_state: the offset must be a multiple of 4, got ", offset);
  seed_ = seed;
  offset_ = offset;
}

c10::intrusive_ptr<c10::TensorImpl> SimhpuGenerator::get_state() const {
  // Made directly, not through the dispatcher: a fake-tensor or tracing mode must not intercept it.
  at::Tensor state = at::detail::empty_cpu({static_cast<int64_t>(kStateBytes)}, at::kByte, std::nullopt,
                                           std::nullopt, std::nullopt, std::nullopt);
  auto* bytes = state.data_ptr<uint8_t>();
  std::memcpy(bytes, &seed_, 8);
  std::memcpy(bytes + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

uint64_t SimhpuGenerator::take_launch_seed(uint64_t numbers) {
  const uint64_t counter = offset_ / 4;
  const auto words = philox4x32_10(
      {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
      {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  offset_ += (std::max<uint64_t>(numbers, 1) + 3) / 4 * 4;
  return low_then_high(words[0], words[1]);
}

SimhpuGenerator* SimhpuGenerator::clone_impl() const {
  auto* copy = new SimhpuGenerator(device_.index(), seed_);
  copy->offset_ = offset_;
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

uint64_t take_launch_seed(const at::Generator& generator, uint64_t numbers) {
  auto* g = generator.get<SimhpuGenerator>();
  std::lock_guard<std::mutex> lock(g->mutex_);
  return g->take_launch_seed(numbers);
}

} // namespace simhpu
