#include "distributed/call_agreement.h"

#include "runtime/env_flags.h"

#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <array>
#include <sstream>
#include <string>
#include <vector>

namespace simhpu {
namespace {

constexpr size_t kFields = 6;

std::array<int64_t, kFields> as_array(const CallSignature& s) {
  return {s.collective, s.root, s.reduce_op, s.dtype, s.elements, s.tensors};
}

const char* const kFieldNames[kFields] = {"collective", "root rank", "reduce op", "dtype", "elements", "tensors"};

std::string describe(size_t field, int64_t value) {
  if (value < 0) return "none";
  switch (field) {
    case 0:
      return c10d::opTypeToString(static_cast<c10d::OpType>(value));
    case 2: {
      static const char* const names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
      return value < 9 ? names[value] : std::to_string(value);
    }
    case 3:
      return c10::toString(static_cast<c10::ScalarType>(value));
    default:
      return std::to_string(value);
  }
}

} // namespace

bool collective_checks_enabled() {
  static const bool enabled = env_flag("SIMHPU_COLLECTIVE_CHECKS", true);
  return enabled;
}

void check_ranks_agree(c10d::Backend& transport, const char* name, const CallSignature& mine) {
  const int size = transport.getSize();
  const auto fields = as_array(mine);
  std::vector<at::Tensor> input{at::empty({static_cast<int64_t>(kFields)}, at::kLong)};
  std::copy(fields.begin(), fields.end(), input[0].data_ptr<int64_t>());
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (int r = 0; r < size; ++r) {
    gathered[0].push_back(at::empty({static_cast<int64_t>(kFields)}, at::kLong));
  }
  transport.allgather(gathered, input)->wait();

  std::ostringstream differences;
  for (size_t f = 0; f < kFields; ++f) {
    bool same = true;
    for (int r = 1; r < size; ++r) {
      same = same && gathered[0][r].data_ptr<int64_t>()[f] == gathered[0][0].data_ptr<int64_t>()[f];
    }
    if (same) continue;
    differences << (differences.tellp() > 0 ? "; " : "") << kFieldNames[f] << ":";
    for (int r = 0; r < size; ++r) {
      differences << (r ? "," : "") << " rank " << r << " " << describe(f, gathered[0][r].data_ptr<int64_t>()[f]);
    }
  }
  TORCH_CHECK(differences.tellp() == 0, "the ranks' calls do not match (", differences.str(), "); every rank must call ",
              name, " with the same root, reduce op, dtype and sizes, in the same order as the other ranks' "
              "collectives; no data was exchanged");
}

} // namespace simhpu
