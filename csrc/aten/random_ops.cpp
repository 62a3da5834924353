// Random fills on the device, drawn from the device's generator (or the one
// passed), so torch.randn(..., device="simhpu") follows torch.simhpu.manual_seed.
// Numbers are drawn at launch, in launch order, then copied in through the queue.
#include "runtime/device.h"
#include "runtime/generator.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <mutex>

namespace simhpu {
namespace {

SimhpuGenerator* generator_for(const at::Tensor& self, const std::optional<at::Generator>& gen, const char* op) {
  const at::Generator& chosen =
      gen.has_value() && gen->defined() ? *gen : default_generator(self.device().index());
  TORCH_CHECK(chosen.device() == self.device(), op, ": expected a generator of ", self.device(), ", got one of ",
              chosen.device());
  return chosen.get<SimhpuGenerator>();
}

template <typename Fill>
at::Tensor& fill_randomly(at::Tensor& self, const std::optional<at::Generator>& gen, const char* op, Fill fill) {
  SimhpuGenerator* g = generator_for(self, gen, op);
  at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  {
    std::lock_guard<std::mutex> lock(g->mutex_);
    fill(host, g->engine());
  }
  self.copy_(host);
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  return fill_randomly(self, gen, "normal_", [&](at::Tensor& t, const at::Generator& g) { t.normal_(mean, std, g); });
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  return fill_randomly(self, gen, "uniform_", [&](at::Tensor& t, const at::Generator& g) { t.uniform_(from, to, g); });
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> gen) {
  return fill_randomly(self, gen, "random_", [&](at::Tensor& t, const at::Generator& g) { t.random_(from, to, g); });
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return fill_randomly(self, gen, "random_", [&](at::Tensor& t, const at::Generator& g) { t.random_(to, g); });
}

at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> gen) {
  return fill_randomly(self, gen, "random_", [&](at::Tensor& t, const at::Generator& g) { t.random_(g); });
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  return fill_randomly(self, gen, "bernoulli_", [&](at::Tensor& t, const at::Generator& g) { t.bernoulli_(p, g); });
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("normal_", TORCH_FN(normal_));
  m.impl("uniform_", TORCH_FN(uniform_));
  m.impl("random_.from", TORCH_FN(random_from));
  m.impl("random_.to", TORCH_FN(random_to));
  m.impl("random_", TORCH_FN(random_));
  m.impl("bernoulli_.float", TORCH_FN(bernoulli_float));
}

} // namespace simhpu
