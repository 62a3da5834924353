#pragma once
// op-plugin's output rules in C++: the value a rule computes with, and the
// output-size helpers its rules call. codegen/model/op_plugin_rules_cpp.py renders each
// readable rule of a dialect file (codegen/model/op_plugin_rules.py parses it) as a
// C++ expression over RuleValue, calling only what this header declares; the
// helpers behave as the Python evaluator's do (codegen/model/op_plugin_rules.py,
// HELPERS), which is what `python -m codegen check-rules` holds to ATen.
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace simhpu::op_plugin {

// A rule that cannot be evaluated for a call's arguments (a size of a
// string, an index past the end): the call's outputs go unchecked, as the
// Python evaluator leaves them.
struct RuleUnreadable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RuleValue {
  enum class Kind { None, Bool, Int, Float, Dtype, Sizes, Tensor, List, Opaque };
  Kind kind = Kind::None;
  bool flag = false;
  int64_t integer = 0;
  double real = 0.0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> sizes;     // Sizes, and a Tensor's sizes
  std::vector<RuleValue> items;   // List (of tensors, or of lists)

  static RuleValue none() { return {}; }
  static RuleValue boolean(bool b);
  static RuleValue number(int64_t i);
  static RuleValue number(double f);
  static RuleValue of(c10::ScalarType t);
  static RuleValue shape(std::vector<int64_t> s);
  static RuleValue tensor(std::vector<int64_t> s, c10::ScalarType t);
  // A braced list: all integers make sizes, anything else a list.
  static RuleValue list(std::vector<RuleValue> values);
  // An argument of a call, as the rules see it (a tensor by its sizes and dtype).
  static RuleValue from_ivalue(const c10::IValue& value, bool is_scalar_type);
};

// A call's arguments by their schema names.
class RuleArgs {
 public:
  void add(std::string name, RuleValue value) { values_.emplace_back(std::move(name), std::move(value)); }
  const RuleValue& operator()(const char* name) const;

 private:
  std::vector<std::pair<std::string, RuleValue>> values_;
};

bool truthy(const RuleValue& v);
RuleValue operator+(const RuleValue& a, const RuleValue& b);
RuleValue operator-(const RuleValue& a, const RuleValue& b);
RuleValue operator*(const RuleValue& a, const RuleValue& b);
RuleValue operator/(const RuleValue& a, const RuleValue& b);  // integers: floor division, as the Python's //
RuleValue operator-(const RuleValue& a);
RuleValue operator!(const RuleValue& a);
RuleValue operator==(const RuleValue& a, const RuleValue& b);
RuleValue operator!=(const RuleValue& a, const RuleValue& b);
RuleValue operator<(const RuleValue& a, const RuleValue& b);
RuleValue operator<=(const RuleValue& a, const RuleValue& b);
RuleValue operator>(const RuleValue& a, const RuleValue& b);
RuleValue operator>=(const RuleValue& a, const RuleValue& b);
RuleValue index(const RuleValue& container, const RuleValue& i);
// x.NAME(args): sizes, sym_sizes, size, sym_size, scalar_type, dtype, dim, numel, value_or, has_value, value.
RuleValue method(const RuleValue& object, const char* name, const std::vector<RuleValue>& args);

// What a size rule and a dtype rule give, as an output's sizes and dtype.
std::vector<int64_t> result_sizes(const RuleValue& v);
c10::ScalarType result_dtype(const RuleValue& v);

// op-plugin's helpers, by the behaviour of the operators they serve.
namespace helpers {
RuleValue broadcast_ops_npu_output_size(const RuleValue& a, const RuleValue& b);
RuleValue reduce_ops_npu_output_size(const RuleValue& t, const RuleValue& dims, const RuleValue& keepdim);
RuleValue input_same_output_size(const RuleValue& t);
RuleValue get_dimlist_for_tensor(const RuleValue& t);
RuleValue glu_npu_output_size(const RuleValue& t, const RuleValue& dim);
RuleValue stack_output_size(const RuleValue& tensors, const RuleValue& dim);
RuleValue clamp_npu_output_size(const RuleValue& t, const RuleValue& min, const RuleValue& max);
RuleValue addr_npu_output_size(const RuleValue& t, const RuleValue& v1, const RuleValue& v2);
RuleValue repeat_npu_output_size(const RuleValue& t, const RuleValue& repeats);
RuleValue isIntegralType(const RuleValue& dtype, const RuleValue& include_bool);
RuleValue isFloatingType(const RuleValue& dtype);
RuleValue abs_out_dtype(const RuleValue& t);
RuleValue angle_out_dtype(const RuleValue& t);
RuleValue polar_out_dtype(const RuleValue& magnitude, const RuleValue& angle);
RuleValue result_type(const std::vector<RuleValue>& values);
RuleValue typeMetaToScalarType(const RuleValue& dtype);
RuleValue promoteTypes(const RuleValue& a, const RuleValue& b);
RuleValue clamp_out_dtype(const RuleValue& t, const RuleValue& min, const RuleValue& max);
RuleValue clamp_scalar_out_dtype(const RuleValue& t, const RuleValue& min, const RuleValue& max);
RuleValue max_pool2d_out_size(const RuleValue& t, const RuleValue& output_size);
RuleValue max_pool3d_output_size(const RuleValue& t, const RuleValue& output_size);
RuleValue adaptive_avg_pool3d_npu_output_size(const RuleValue& t, const RuleValue& output_size);
RuleValue cdist_npu_output_size(const RuleValue& x1, const RuleValue& x2);
RuleValue im2col_backward_npu_output_size(const RuleValue& t, const RuleValue& output_size,
                                          const RuleValue& kernel_size);
RuleValue isclose_output_size(const RuleValue& a, const RuleValue& b, const RuleValue& rtol, const RuleValue& atol,
                              const RuleValue& equal_nan);
RuleValue reflection_pad1d_npu_out_size(const RuleValue& t, const RuleValue& padding);
RuleValue reflection_pad2d_npu_out_size(const RuleValue& t, const RuleValue& padding);
RuleValue reflection_pad3d_npu_out_size(const RuleValue& t, const RuleValue& padding);
RuleValue replication_pad1d_npu_out_size(const RuleValue& t, const RuleValue& padding);
RuleValue replication_pad2d_npu_out_size(const RuleValue& t, const RuleValue& padding);
RuleValue replication_pad3d_npu_out_size(const RuleValue& t, const RuleValue& padding);
// The CANN toolkit's version: simhpu stands for the newest, so a rule's newer branch is taken.
RuleValue is_gte_cann_version_820rc1();
// Type conversions the rules write around sizes (ArrayRef<int64_t>(...), SmallVector<...>{}): as
// the Python evaluator reads them, an empty size list.
RuleValue empty_sizes();
}  // namespace helpers

}  // namespace simhpu::op_plugin
