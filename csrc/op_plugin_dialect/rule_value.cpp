#include "op_plugin_dialect/rule_value.h"

#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DefaultDtype.h>

#include <algorithm>
#include <set>

namespace simhpu::op_plugin {

namespace {

using Kind = RuleValue::Kind;

[[noreturn]] void unreadable(const std::string& what) { throw RuleUnreadable(what); }

bool is_number(const RuleValue& v) { return v.kind == Kind::Bool || v.kind == Kind::Int || v.kind == Kind::Float; }

double as_double(const RuleValue& v) {
  switch (v.kind) {
    case Kind::Bool: return v.flag ? 1.0 : 0.0;
    case Kind::Int: return static_cast<double>(v.integer);
    case Kind::Float: return v.real;
    default: unreadable("expected a number");
  }
}

int64_t as_int(const RuleValue& v) {
  if (v.kind == Kind::Bool) return v.flag ? 1 : 0;
  if (v.kind == Kind::Int) return v.integer;
  unreadable("expected an integer");
}

c10::ScalarType as_dtype(const RuleValue& v) {
  if (v.kind == Kind::Dtype || v.kind == Kind::Tensor) return v.dtype;
  unreadable("expected a dtype");
}

// Sizes as the Python evaluator's _sizes reads them: a tensor's, a list of integers, one integer.
std::vector<int64_t> as_sizes(const RuleValue& v) {
  if (v.kind == Kind::Sizes || v.kind == Kind::Tensor) return v.sizes;
  if (v.kind == Kind::Int) return {v.integer};
  unreadable("expected sizes");
}

// A possibly negative position wrapped into [0, n), as Python's indexing does.
int64_t wrapped(int64_t i, int64_t n) {
  const int64_t w = i < 0 ? i + n : i;
  if (w < 0 || w >= n) unreadable("index out of range");
  return w;
}

int64_t python_mod(int64_t a, int64_t n) {
  const int64_t r = a % n;
  return r < 0 ? r + n : r;
}

RuleValue arithmetic(const RuleValue& a, const RuleValue& b, char op) {
  if (op == '+' && a.kind == Kind::Sizes && b.kind == Kind::Sizes) {  // tuples concatenate
    std::vector<int64_t> joined = a.sizes;
    joined.insert(joined.end(), b.sizes.begin(), b.sizes.end());
    return RuleValue::shape(std::move(joined));
  }
  if (!is_number(a) || !is_number(b)) unreadable("arithmetic on something other than numbers");
  if (a.kind == Kind::Float || b.kind == Kind::Float) {
    const double x = as_double(a), y = as_double(b);
    switch (op) {
      case '+': return RuleValue::number(x + y);
      case '-': return RuleValue::number(x - y);
      case '*': return RuleValue::number(x * y);
      default:
        if (y == 0) unreadable("division by zero");
        return RuleValue::number(std::floor(x / y));
    }
  }
  const int64_t x = as_int(a), y = as_int(b);
  switch (op) {
    case '+': return RuleValue::number(x + y);
    case '-': return RuleValue::number(x - y);
    case '*': return RuleValue::number(x * y);
    default: {
      if (y == 0) unreadable("division by zero");
      const int64_t q = x / y;
      return RuleValue::number((x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q);
    }
  }
}

bool equal(const RuleValue& a, const RuleValue& b) {
  if (is_number(a) && is_number(b)) return as_double(a) == as_double(b);
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::None: return true;
    case Kind::Dtype: return a.dtype == b.dtype;
    case Kind::Sizes: return a.sizes == b.sizes;
    case Kind::Tensor: return a.sizes == b.sizes && a.dtype == b.dtype;
    case Kind::List:
      return a.items.size() == b.items.size() &&
             std::equal(a.items.begin(), a.items.end(), b.items.begin(), equal);
    default: unreadable("comparison of values the rules cannot compare");
  }
}

bool less(const RuleValue& a, const RuleValue& b) {
  if (!is_number(a) || !is_number(b)) unreadable("ordering of something other than numbers");
  return as_double(a) < as_double(b);
}

// The reduced dimensions as the Python evaluator's _dims: none or an empty list means all.
std::set<int64_t> reduced_dims(const RuleValue& dims, int64_t rank) {
  std::set<int64_t> out;
  if (dims.kind == Kind::None || (dims.kind == Kind::Sizes && dims.sizes.empty())) {
    for (int64_t d = 0; d < rank; ++d) out.insert(d);
    return out;
  }
  for (int64_t d : as_sizes(dims)) out.insert(rank ? python_mod(d, rank) : 0);
  return out;
}

at::Tensor dtype_probe(const RuleValue& v) {
  // A meta tensor of the value's dtype and dimensionality: what type promotion looks at.
  return at::empty(std::vector<int64_t>(v.sizes.size(), 1), at::TensorOptions().dtype(v.dtype).device(at::kMeta));
}

c10::Scalar as_scalar(const RuleValue& v) {
  switch (v.kind) {
    case Kind::Bool: return v.flag;
    case Kind::Int: return v.integer;
    case Kind::Float: return v.real;
    default: unreadable("expected a tensor or a number");
  }
}

c10::ScalarType default_dtype_of(const RuleValue& v) {
  switch (v.kind) {
    case Kind::Tensor: return v.dtype;
    case Kind::Bool: return c10::ScalarType::Bool;
    case Kind::Int: return c10::ScalarType::Long;
    case Kind::Float: return c10::get_default_dtype_as_scalartype();
    default: unreadable("expected a tensor or a number");
  }
}

}  // namespace

RuleValue RuleValue::boolean(bool b) {
  RuleValue v;
  v.kind = Kind::Bool;
  v.flag = b;
  return v;
}

RuleValue RuleValue::number(int64_t i) {
  RuleValue v;
  v.kind = Kind::Int;
  v.integer = i;
  return v;
}

RuleValue RuleValue::number(double f) {
  RuleValue v;
  v.kind = Kind::Float;
  v.real = f;
  return v;
}

RuleValue RuleValue::of(c10::ScalarType t) {
  RuleValue v;
  v.kind = Kind::Dtype;
  v.dtype = t;
  return v;
}

RuleValue RuleValue::shape(std::vector<int64_t> s) {
  RuleValue v;
  v.kind = Kind::Sizes;
  v.sizes = std::move(s);
  return v;
}

RuleValue RuleValue::tensor(std::vector<int64_t> s, c10::ScalarType t) {
  RuleValue v;
  v.kind = Kind::Tensor;
  v.sizes = std::move(s);
  v.dtype = t;
  return v;
}

RuleValue RuleValue::list(std::vector<RuleValue> values) {
  if (std::all_of(values.begin(), values.end(), [](const RuleValue& x) { return x.kind == Kind::Int; })) {
    std::vector<int64_t> s;
    for (const RuleValue& x : values) s.push_back(x.integer);
    return shape(std::move(s));
  }
  RuleValue v;
  v.kind = Kind::List;
  v.items = std::move(values);
  return v;
}

RuleValue RuleValue::from_ivalue(const c10::IValue& value, bool is_scalar_type) {
  if (value.isNone()) return none();
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined()) return none();
    return tensor(t.sizes().vec(), t.scalar_type());
  }
  if (is_scalar_type && value.isInt()) return of(static_cast<c10::ScalarType>(value.toInt()));
  if (value.isBool()) return boolean(value.toBool());
  if (value.isInt()) return number(value.toInt());
  if (value.isSymInt()) return number(value.toSymInt().guard_int(__FILE__, __LINE__));
  if (value.isDouble()) return number(value.toDouble());
  if (value.isIntList()) return shape(value.toIntVector());
  if (value.isSymIntList()) {
    std::vector<int64_t> sizes;
    for (const c10::SymInt& s : value.toSymIntList()) sizes.push_back(s.guard_int(__FILE__, __LINE__));
    return shape(std::move(sizes));
  }
  if (value.isList()) {
    std::vector<RuleValue> items;
    for (const c10::IValue& item : value.toListRef()) items.push_back(from_ivalue(item, false));
    RuleValue v;
    v.kind = Kind::List;
    v.items = std::move(items);
    return v;
  }
  RuleValue v;
  v.kind = Kind::Opaque;  // a string, a device, a generator: nothing a size rule computes with
  return v;
}

const RuleValue& RuleArgs::operator()(const char* name) const {
  for (const auto& [key, value] : values_) {
    if (key == name) return value;
  }
  unreadable(std::string("no argument '") + name + "'");
}

bool truthy(const RuleValue& v) {
  switch (v.kind) {
    case Kind::None: return false;
    case Kind::Bool: return v.flag;
    case Kind::Int: return v.integer != 0;
    case Kind::Float: return v.real != 0.0;
    case Kind::Sizes: return !v.sizes.empty();
    case Kind::List: return !v.items.empty();
    default: return true;
  }
}

RuleValue operator+(const RuleValue& a, const RuleValue& b) { return arithmetic(a, b, '+'); }
RuleValue operator-(const RuleValue& a, const RuleValue& b) { return arithmetic(a, b, '-'); }
RuleValue operator*(const RuleValue& a, const RuleValue& b) { return arithmetic(a, b, '*'); }
RuleValue operator/(const RuleValue& a, const RuleValue& b) { return arithmetic(a, b, '/'); }
RuleValue operator-(const RuleValue& a) { return arithmetic(RuleValue::number(int64_t{0}), a, '-'); }
RuleValue operator!(const RuleValue& a) { return RuleValue::boolean(!truthy(a)); }
RuleValue operator==(const RuleValue& a, const RuleValue& b) { return RuleValue::boolean(equal(a, b)); }
RuleValue operator!=(const RuleValue& a, const RuleValue& b) { return RuleValue::boolean(!equal(a, b)); }
RuleValue operator<(const RuleValue& a, const RuleValue& b) { return RuleValue::boolean(less(a, b)); }
RuleValue operator<=(const RuleValue& a, const RuleValue& b) { return RuleValue::boolean(!less(b, a)); }
RuleValue operator>(const RuleValue& a, const RuleValue& b) { return RuleValue::boolean(less(b, a)); }
RuleValue operator>=(const RuleValue& a, const RuleValue& b) { return RuleValue::boolean(!less(a, b)); }

RuleValue index(const RuleValue& container, const RuleValue& i) {
  if (container.kind == Kind::Sizes) {
    return RuleValue::number(container.sizes[wrapped(as_int(i), static_cast<int64_t>(container.sizes.size()))]);
  }
  if (container.kind == Kind::List) {
    return container.items[wrapped(as_int(i), static_cast<int64_t>(container.items.size()))];
  }
  unreadable("indexing something other than a list");
}

RuleValue method(const RuleValue& object, const char* name, const std::vector<RuleValue>& args) {
  const std::string n = name;
  if (object.kind == Kind::Tensor) {
    if (n == "sizes" || n == "sym_sizes") return RuleValue::shape(object.sizes);
    if ((n == "size" || n == "sym_size") && args.size() == 1) {
      return RuleValue::number(object.sizes[wrapped(as_int(args[0]), static_cast<int64_t>(object.sizes.size()))]);
    }
    if (n == "scalar_type" || n == "dtype") return RuleValue::of(object.dtype);
    if (n == "dim") return RuleValue::number(static_cast<int64_t>(object.sizes.size()));
    if (n == "numel") {
      int64_t count = 1;
      for (int64_t s : object.sizes) count *= s;
      return RuleValue::number(count);
    }
  }
  if (n == "value_or" && args.size() == 1) return object.kind == Kind::None ? args[0] : object;
  if (n == "has_value") return RuleValue::boolean(object.kind != Kind::None);
  if (n == "value" && args.empty() && object.kind != Kind::None) return object;
  if (n == "size" && args.empty() && object.kind == Kind::Sizes) {
    return RuleValue::number(static_cast<int64_t>(object.sizes.size()));
  }
  if (n == "size" && args.empty() && object.kind == Kind::List) {
    return RuleValue::number(static_cast<int64_t>(object.items.size()));
  }
  unreadable("'." + n + "()' is not known for this value");
}

std::vector<int64_t> result_sizes(const RuleValue& v) {
  if (v.kind == Kind::Tensor || v.kind == Kind::Sizes) return v.sizes;
  unreadable("a size rule gave something other than sizes");
}

c10::ScalarType result_dtype(const RuleValue& v) { return as_dtype(v); }

namespace helpers {

RuleValue broadcast_ops_npu_output_size(const RuleValue& a, const RuleValue& b) {
  const std::vector<int64_t> x = as_sizes(a), y = as_sizes(b);
  try {
    return RuleValue::shape(at::infer_size(x, y));
  } catch (const c10::Error&) {
    unreadable("sizes that do not broadcast");
  }
}

RuleValue reduce_ops_npu_output_size(const RuleValue& t, const RuleValue& dims, const RuleValue& keepdim) {
  const std::vector<int64_t> sizes = as_sizes(t);
  const auto reduced = reduced_dims(dims, static_cast<int64_t>(sizes.size()));
  std::vector<int64_t> out;
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) {
    if (!reduced.count(i)) out.push_back(sizes[i]);
    else if (truthy(keepdim)) out.push_back(1);
  }
  return RuleValue::shape(std::move(out));
}

RuleValue input_same_output_size(const RuleValue& t) { return RuleValue::shape(as_sizes(t)); }

RuleValue get_dimlist_for_tensor(const RuleValue& t) {
  std::vector<int64_t> dims(as_sizes(t).size());
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(i);
  return RuleValue::shape(std::move(dims));
}

RuleValue glu_npu_output_size(const RuleValue& t, const RuleValue& dim) {
  std::vector<int64_t> sizes = as_sizes(t);
  if (sizes.empty()) unreadable("glu of a zero-dimensional tensor");
  int64_t& halved = sizes[python_mod(as_int(dim), static_cast<int64_t>(sizes.size()))];
  halved /= 2;
  return RuleValue::shape(std::move(sizes));
}

RuleValue stack_output_size(const RuleValue& tensors, const RuleValue& dim) {
  if (tensors.kind != Kind::List || tensors.items.empty()) unreadable("stack of something other than tensors");
  std::vector<int64_t> sizes = as_sizes(tensors.items[0]);
  const int64_t at = python_mod(as_int(dim), static_cast<int64_t>(sizes.size()) + 1);
  sizes.insert(sizes.begin() + at, static_cast<int64_t>(tensors.items.size()));
  return RuleValue::shape(std::move(sizes));
}

RuleValue clamp_npu_output_size(const RuleValue& t, const RuleValue& min, const RuleValue& max) {
  const RuleValue empty = RuleValue::shape({});
  const RuleValue low = broadcast_ops_npu_output_size(t, min.kind == Kind::None ? empty : min);
  return broadcast_ops_npu_output_size(low, max.kind == Kind::None ? empty : max);
}

RuleValue addr_npu_output_size(const RuleValue& t, const RuleValue& v1, const RuleValue& v2) {
  const std::vector<int64_t> a = as_sizes(v1), b = as_sizes(v2);
  if (a.empty() || b.empty()) unreadable("addr of zero-dimensional vectors");
  return broadcast_ops_npu_output_size(t, RuleValue::shape({a[0], b[0]}));
}

RuleValue repeat_npu_output_size(const RuleValue& t, const RuleValue& repeats) {
  const std::vector<int64_t> sizes = as_sizes(t), times = as_sizes(repeats);
  if (times.size() < sizes.size()) unreadable("fewer repeats than dimensions");
  std::vector<int64_t> out(times.size());
  const size_t pad = times.size() - sizes.size();
  for (size_t i = 0; i < times.size(); ++i) out[i] = (i < pad ? 1 : sizes[i - pad]) * times[i];
  return RuleValue::shape(std::move(out));
}

RuleValue isIntegralType(const RuleValue& dtype, const RuleValue& include_bool) {
  return RuleValue::boolean(c10::isIntegralType(as_dtype(dtype), truthy(include_bool)));
}

RuleValue isFloatingType(const RuleValue& dtype) { return RuleValue::boolean(c10::isFloatingType(as_dtype(dtype))); }

RuleValue abs_out_dtype(const RuleValue& t) {
  const c10::ScalarType d = as_dtype(t);
  return RuleValue::of(c10::isComplexType(d) ? c10::toRealValueType(d) : d);
}

RuleValue angle_out_dtype(const RuleValue& t) {
  const c10::ScalarType d = as_dtype(t);
  if (c10::isComplexType(d)) return RuleValue::of(c10::toRealValueType(d));
  return RuleValue::of(c10::isFloatingType(d) ? d : c10::ScalarType::Float);
}

RuleValue polar_out_dtype(const RuleValue& magnitude, const RuleValue&) {
  const c10::ScalarType d = as_dtype(magnitude);
  return RuleValue::of(c10::isFloatingType(d) ? c10::toComplexType(d) : d);
}

RuleValue result_type(const std::vector<RuleValue>& given) {
  const std::vector<RuleValue>& values = (given.size() == 1 && given[0].kind == Kind::List) ? given[0].items : given;
  if (values.empty()) unreadable("result_type of nothing");
  if (values.size() == 2) {  // ATen's own promotion: a tensor's dimensionality and a number's kind count
    const RuleValue &a = values[0], &b = values[1];
    if (a.kind == Kind::Tensor && b.kind == Kind::Tensor) return RuleValue::of(at::result_type(dtype_probe(a), dtype_probe(b)));
    if (a.kind == Kind::Tensor) return RuleValue::of(at::result_type(dtype_probe(a), as_scalar(b)));
    if (b.kind == Kind::Tensor) return RuleValue::of(at::result_type(as_scalar(a), dtype_probe(b)));
    return RuleValue::of(at::result_type(as_scalar(a), as_scalar(b)));
  }
  c10::ScalarType promoted = default_dtype_of(values[0]);
  for (size_t i = 1; i < values.size(); ++i) promoted = c10::promoteTypes(promoted, default_dtype_of(values[i]));
  return RuleValue::of(promoted);
}

RuleValue typeMetaToScalarType(const RuleValue& dtype) { return RuleValue::of(as_dtype(dtype)); }

RuleValue empty_sizes() { return RuleValue::shape({}); }

RuleValue promoteTypes(const RuleValue& a, const RuleValue& b) {
  return RuleValue::of(c10::promoteTypes(as_dtype(a), as_dtype(b)));
}

RuleValue clamp_out_dtype(const RuleValue& t, const RuleValue& min, const RuleValue& max) {
  auto bound = [](const RuleValue& v) -> std::optional<at::Tensor> {
    if (v.kind == Kind::None) return std::nullopt;
    if (v.kind != Kind::Tensor) unreadable("expected a tensor bound");
    return dtype_probe(v);
  };
  return RuleValue::of(at::clamp(dtype_probe(t), bound(min), bound(max)).scalar_type());
}

RuleValue clamp_scalar_out_dtype(const RuleValue& t, const RuleValue& min, const RuleValue& max) {
  auto bound = [](const RuleValue& v) -> std::optional<c10::Scalar> {
    if (v.kind == Kind::None) return std::nullopt;
    return as_scalar(v);
  };
  return RuleValue::of(at::clamp(dtype_probe(t), bound(min), bound(max)).scalar_type());
}

namespace {

// Pooling and unpooling: the leading (batch, channel) sizes, then the given spatial sizes.
RuleValue spatial(const RuleValue& t, const RuleValue& output_size, size_t dims) {
  std::vector<int64_t> sizes = as_sizes(t);
  if (sizes.size() < dims) unreadable("fewer dimensions than the pooling's");
  sizes.resize(sizes.size() - dims);
  for (int64_t s : as_sizes(output_size)) sizes.push_back(s);
  return RuleValue::shape(std::move(sizes));
}

// Reflection and replication padding: (left, right) of the last dimension, then of the one before, ...
RuleValue padded(const RuleValue& t, const RuleValue& padding) {
  std::vector<int64_t> sizes = as_sizes(t);
  const std::vector<int64_t> pad = as_sizes(padding);
  if (pad.size() / 2 > sizes.size()) unreadable("more padding than dimensions");
  for (size_t i = 0; i < pad.size() / 2; ++i) sizes[sizes.size() - 1 - i] += pad[2 * i] + pad[2 * i + 1];
  return RuleValue::shape(std::move(sizes));
}

}  // namespace

RuleValue max_pool2d_out_size(const RuleValue& t, const RuleValue& output_size) { return spatial(t, output_size, 2); }
RuleValue max_pool3d_output_size(const RuleValue& t, const RuleValue& output_size) { return spatial(t, output_size, 3); }
RuleValue adaptive_avg_pool3d_npu_output_size(const RuleValue& t, const RuleValue& output_size) {
  return spatial(t, output_size, 3);
}

RuleValue cdist_npu_output_size(const RuleValue& x1, const RuleValue& x2) {
  const std::vector<int64_t> a = as_sizes(x1), b = as_sizes(x2);
  if (a.size() < 2 || b.size() < 2) unreadable("cdist of tensors under two dimensions");
  std::vector<int64_t> sizes = as_sizes(broadcast_ops_npu_output_size(
      RuleValue::shape(std::vector<int64_t>(a.begin(), a.end() - 2)),
      RuleValue::shape(std::vector<int64_t>(b.begin(), b.end() - 2))));
  sizes.push_back(a[a.size() - 2]);
  sizes.push_back(b[b.size() - 2]);
  return RuleValue::shape(std::move(sizes));
}

RuleValue im2col_backward_npu_output_size(const RuleValue& t, const RuleValue& output_size,
                                          const RuleValue& kernel_size) {
  std::vector<int64_t> sizes = as_sizes(t);
  if (sizes.size() < 2) unreadable("col2im of a tensor under two dimensions");
  int64_t blocks = 1;
  for (int64_t k : as_sizes(kernel_size)) blocks *= k;
  if (blocks == 0) unreadable("an empty kernel");
  const int64_t channels = sizes[sizes.size() - 2] / blocks;
  sizes.resize(sizes.size() - 2);
  sizes.push_back(channels);
  for (int64_t s : as_sizes(output_size)) sizes.push_back(s);
  return RuleValue::shape(std::move(sizes));
}

RuleValue isclose_output_size(const RuleValue& a, const RuleValue& b, const RuleValue&, const RuleValue&,
                              const RuleValue&) {
  return broadcast_ops_npu_output_size(a, b);
}

RuleValue reflection_pad1d_npu_out_size(const RuleValue& t, const RuleValue& p) { return padded(t, p); }
RuleValue reflection_pad2d_npu_out_size(const RuleValue& t, const RuleValue& p) { return padded(t, p); }
RuleValue reflection_pad3d_npu_out_size(const RuleValue& t, const RuleValue& p) { return padded(t, p); }
RuleValue replication_pad1d_npu_out_size(const RuleValue& t, const RuleValue& p) { return padded(t, p); }
RuleValue replication_pad2d_npu_out_size(const RuleValue& t, const RuleValue& p) { return padded(t, p); }
RuleValue replication_pad3d_npu_out_size(const RuleValue& t, const RuleValue& p) { return padded(t, p); }

RuleValue is_gte_cann_version_820rc1() { return RuleValue::boolean(true); }

}  // namespace helpers

}  // namespace simhpu::op_plugin
