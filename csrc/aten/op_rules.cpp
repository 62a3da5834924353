#include "aten/op_rules.h"

#include "runtime/launch_work.h"
#include "runtime/observers.h"
#include "runtime/own_work.h"
#include "runtime/pinned_memory.h"

#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/native/TypeProperties.h>
#include <c10/core/Allocator.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>
#include <string>

namespace simhpu::rules {
namespace {

std::string dtype_list(std::initializer_list<c10::ScalarType> dtypes) {
  std::ostringstream out;
  const char* sep = "";
  for (auto d : dtypes) {
    out << sep << c10::toString(d);
    sep = ", ";
  }
  return out.str();
}

} // namespace

void check_device(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
  TORCH_CHECK(t.is_privateuseone(), op, ": expected argument '", arg,
              "' on a simhpu device, but it is on ", t.device(),
              "; move it with .to('simhpu')");
}

void check_device(const char* op, const char* arg, const at::Tensor& t, const at::Tensor& first) {
  check_device(op, arg, t);
  TORCH_CHECK(t.device() == first.device(), op, ": expected all tensors on one device, but argument '",
              arg, "' is on ", t.device(), " and the first tensor on ", first.device());
}

void check_device(const char* op, const char* arg, const std::optional<at::Tensor>& t, const at::Tensor& first) {
  if (t.has_value() && t->defined()) {
    check_device(op, arg, *t, first);
  }
}

void check_device(const char* op, const char* arg, at::TensorList list, const at::Tensor& first) {
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = std::string(arg) + "[" + std::to_string(i) + "]";
    check_device(op, name.c_str(), list[i], first);
  }
}

c10::ScalarType promote_types(TensorRefs tensors) {
  at::native::ResultTypeState state = {};
  for (const at::Tensor& t : tensors) {
    state = at::native::update_result_type_state(t, state);
  }
  return at::native::result_type(state);
}

void check_compute_dtype(const char* op, std::initializer_list<const char*> args, c10::ScalarType dtype,
                         std::initializer_list<c10::ScalarType> allowed) {
  for (auto d : allowed) {
    if (d == dtype) {
      return;
    }
  }
  std::string names;
  for (const char* a : args) {
    names += (names.empty() ? "'" : ", '") + std::string(a) + "'";
  }
  TORCH_CHECK_TYPE(false, op, ": arguments ", names, " promote to dtype ", dtype,
                   ", which is not supported; supported dtypes: ", dtype_list(allowed));
}

void prepare_out(const char* op, const char* arg, const at::Tensor& out, const at::Tensor& first,
                 c10::ScalarType dtype, c10::IntArrayRef shape) {
  check_device(op, arg, out, first);
  TORCH_CHECK_TYPE(out.scalar_type() == dtype, op, ": expected out= argument '", arg, "' of dtype ", dtype,
                   ", but it has ", out.scalar_type());
  if (out.sizes() != shape) {
    if (out.numel() != 0) {
      TORCH_WARN(op, ": out= argument '", arg, "' of shape ", out.sizes(), " is resized to ", shape,
                 "; pass an empty tensor or one of the right shape to avoid this warning");
    }
    out.resize_(shape);
  }
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, op, ": out= argument '", arg,
              "' has elements that share memory (an expanded tensor?); pass a tensor whose elements are "
              "distinct, e.g. a clone()");
}

void check_no_partial_overlap(const char* op, const char* written_arg, const at::Tensor& written,
                              const char* read_arg, const at::Tensor& read) {
  TORCH_CHECK(at::get_overlap_status(written, read) != at::MemOverlapStatus::Partial, op, ": '", written_arg,
              "' (written) and '", read_arg, "' (read) partly share memory, so the result would depend on "
              "the order elements are written in; pass a clone() of '", read_arg, "'");
}

void check_inplace(const char* op, const at::Tensor& self, c10::IntArrayRef shape, c10::ScalarType dtype) {
  TORCH_CHECK(at::has_internal_overlap(self) != at::MemOverlap::Yes, op,
              ": 'self' has elements that share memory (an expanded tensor?), so it cannot be written in place; "
              "use the out-of-place op or a clone()");
  TORCH_CHECK_VALUE(self.sizes() == shape, op, ": the result has shape ", shape,
                    ", which cannot be written in place into 'self' of shape ", self.sizes());
  TORCH_CHECK_TYPE(self.scalar_type() == dtype, op, ": the result has dtype ", dtype,
                   ", which cannot be written in place into 'self' of dtype ", self.scalar_type());
}

void check_dtype(const char* op, const char* arg, const at::Tensor& t,
                 std::initializer_list<c10::ScalarType> allowed) {
  for (auto d : allowed) {
    if (t.scalar_type() == d) {
      return;
    }
  }
  TORCH_CHECK_TYPE(false, op, ": argument '", arg, "' has dtype ", t.scalar_type(),
                   ", which is not supported; supported dtypes: ", dtype_list(allowed));
}

void check_same_dtype(const char* op, const char* arg, const at::Tensor& t,
                      const char* ref_arg, const at::Tensor& ref) {
  TORCH_CHECK_TYPE(t.scalar_type() == ref.scalar_type(), op, ": expected argument '", arg,
                   "' to have the dtype of '", ref_arg, "' (", ref.scalar_type(), "), but it has ",
                   t.scalar_type());
}

void check_same_shape(const char* op, const char* a_arg, const at::Tensor& a,
                      const char* b_arg, const at::Tensor& b) {
  TORCH_CHECK_VALUE(a.sizes() == b.sizes(), op, ": expected '", a_arg, "' and '", b_arg,
                    "' to have the same shape, but got ", a.sizes(), " and ", b.sizes());
}

void check_same_shape(const char* op, const char* a_arg, const at::Tensor& a,
                      const char* b_arg, at::TensorList b) {
  for (size_t i = 0; i < b.size(); ++i) {
    const std::string name = std::string(b_arg) + "[" + std::to_string(i) + "]";
    check_same_shape(op, a_arg, a, name.c_str(), b[i]);
  }
}

void check_broadcasts_to(const char* op, const char* a_arg, const at::Tensor& a, const char* b_arg,
                         const at::Tensor& b) {
  const c10::IntArrayRef to = b.sizes();
  const int64_t offset = static_cast<int64_t>(to.size()) - a.dim();
  bool fits = offset >= 0;
  for (int64_t d = 0; fits && d < a.dim(); ++d) {
    fits = a.size(d) == 1 || a.size(d) == to[offset + d];
  }
  TORCH_CHECK_VALUE(fits, op, ": argument '", a_arg, "' of shape ", a.sizes(), " does not broadcast to the shape of '",
                    b_arg, "', ", to);
}

void check_broadcasts_to(const char* op, const char* a_arg, const std::optional<at::Tensor>& a, const char* b_arg,
                         const at::Tensor& b) {
  if (a.has_value() && a->defined()) check_broadcasts_to(op, a_arg, *a, b_arg, b);
}

void check_scalar_fits(const char* op, const char* arg, const c10::Scalar& value, c10::ScalarType dtype) {
  const c10::ScalarType compute = at::toOpMathType(dtype);
  try {
    AT_DISPATCH_V2(compute, "check_scalar_fits", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                   AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool, at::kHalf, at::kBFloat16);
  } catch (const std::exception&) {  // c10's overflow report (a c10::Error, or std::runtime_error in some builds)
    TORCH_CHECK_VALUE(false, op, ": argument '", arg, "' = ", value, " cannot be converted to ", compute,
                      " (the dtype the kernel computes ", dtype, " in) without overflow",
                      value.isComplex() && !at::isComplexType(compute) ? " or losing its imaginary part" : "");
  }
}

void check_scalar_fits(const char* op, const char* arg, const std::optional<c10::Scalar>& value,
                       c10::ScalarType dtype) {
  if (value.has_value()) check_scalar_fits(op, arg, *value, dtype);
}

void check_outputs_apart(const char* op, const char* a_arg, const at::Tensor& a, const char* b_arg,
                         const at::Tensor& b) {
  TORCH_CHECK(at::get_overlap_status(a, b) == at::MemOverlapStatus::No, op, ": out= arguments '", a_arg, "' and '",
              b_arg, "' share memory, and the kernel writes both; pass distinct tensors");
}

void check_broadcastable(const char* op, const char* arg, const at::Tensor& t, c10::IntArrayRef shape) {
  const int64_t offset = static_cast<int64_t>(shape.size()) - t.dim();
  bool fits = offset >= 0;
  for (int64_t d = 0; fits && d < t.dim(); ++d) {
    fits = t.size(d) == 1 || t.size(d) == shape[offset + d];
  }
  TORCH_CHECK_VALUE(fits, op, ": argument '", arg, "' of shape ", t.sizes(),
                    " does not broadcast to the output shape ", shape);
}

void check_index_tensor(const char* op, const char* arg, const at::Tensor& index) {
  TORCH_CHECK_TYPE(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op, ": argument '", arg,
                   "' must hold int64 or int32 indices, but it has dtype ", index.scalar_type());
  TORCH_CHECK_INDEX(index.dim() <= 1, op, ": argument '", arg, "' must be a scalar or 1-D, but it has ",
                    index.dim(), " dimensions");
}

void check_one_of(const char* op, const char* arg, c10::string_view value,
                  std::initializer_list<const char*> allowed) {
  for (const char* word : allowed) {
    if (value == word) return;
  }
  std::string words;
  for (const char* word : allowed) {
    words += std::string(words.empty() ? "" : ", ") + "'" + word + "'";
  }
  TORCH_CHECK_VALUE(false, op, ": argument '", arg, "' is '", value, "', expected one of ", words);
}

void check_trailing_shape(const char* op, const char* outer_arg, const at::Tensor& outer,
                          const char* inner_arg, const at::Tensor& inner) {
  const bool fits = inner.dim() >= 1 && inner.dim() <= outer.dim() &&
      outer.sizes().slice(outer.dim() - inner.dim()) == inner.sizes();
  TORCH_CHECK_VALUE(fits, op, ": expected the shape of '", inner_arg, "' ", inner.sizes(),
                    " to equal the trailing dimensions of '", outer_arg, "' ", outer.sizes());
}

void check_gather_index(const char* op, const char* self_arg, const at::Tensor& self, int64_t dim,
                        const char* index_arg, const at::Tensor& index) {
  TORCH_CHECK_TYPE(index.scalar_type() == at::kLong, op, ": argument '", index_arg,
                   "' must hold int64 indices, but it has dtype ", index.scalar_type());
  const int64_t ndim = std::max<int64_t>(self.dim(), 1);
  TORCH_CHECK_INDEX(dim >= -ndim && dim < ndim, op, ": dimension ", dim, " is out of range for argument '",
                    self_arg, "' with ", self.dim(), " dimension(s)");
  TORCH_CHECK_VALUE(std::max<int64_t>(index.dim(), 1) == ndim, op, ": '", index_arg, "' and '", self_arg,
                    "' must have the same number of dimensions, got ", index.dim(), " and ", self.dim());
  const int64_t wrapped = c10::maybe_wrap_dim(dim, ndim);
  for (int64_t d = 0; d < self.dim(); ++d) {
    TORCH_CHECK_VALUE(d == wrapped || index.size(d) <= self.size(d), op, ": '", index_arg, "' ", index.sizes(),
                      " is larger than '", self_arg, "' ", self.sizes(), " in dimension ", d,
                      " (only dimension ", wrapped, ", the one gathered from, may differ)");
  }
}

void check_last_dim(const char* op, const char* outer_arg, const at::Tensor& outer,
                    const char* inner_arg, const at::Tensor& inner) {
  const bool fits = outer.dim() >= 1 && inner.dim() == 1 && inner.size(0) == outer.size(-1);
  TORCH_CHECK_VALUE(fits, op, ": expected '", inner_arg, "' to be 1-D with the size of the last dimension of '",
                    outer_arg, "' ", outer.sizes(), ", got shape ", inner.sizes());
}

void check_row_stat(const char* op, const char* stat_arg, const at::Tensor& stat,
                    const char* x_arg, const at::Tensor& x) {
  std::vector<int64_t> expected = x.sizes().vec();
  if (!expected.empty()) {
    expected.back() = 1;
  }
  TORCH_CHECK_VALUE(stat.sizes() == c10::IntArrayRef(expected), op, ": expected '", stat_arg, "' to have shape ",
                    c10::IntArrayRef(expected), " (one value per row of '", x_arg, "' ", x.sizes(), "), got ",
                    stat.sizes());
}

void check_no_requires_grad(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK(!(t.defined() && t.requires_grad()), op, ": the derivative for argument '", arg,
              "' is not implemented; add it to derivatives.yaml, or mark it non_differentiable there");
}

void check_no_requires_grad(const char* op, const char* arg, const std::optional<at::Tensor>& t) {
  if (t.has_value()) {
    check_no_requires_grad(op, arg, *t);
  }
}

void check_no_requires_grad(const char* op, const char* arg, at::TensorList list) {
  for (const auto& t : list) {
    check_no_requires_grad(op, arg, t);
  }
}

void check_no_forward_grad(const char* op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(!(t.defined() && t._fw_grad(/*level=*/0).defined()), op,
                              ": forward-mode AD (torch.func.jvp, forward_ad) is not supported; argument '", arg,
                              "' carries a tangent. Use reverse mode (backward, torch.func.vjp) instead");
}

void check_no_forward_grad(const char* op, const char* arg, const std::optional<at::Tensor>& t) {
  if (t.has_value()) {
    check_no_forward_grad(op, arg, *t);
  }
}

void check_no_forward_grad(const char* op, const char* arg, at::TensorList list) {
  for (const auto& t : list) {
    check_no_forward_grad(op, arg, t);
  }
}

at::Tensor new_output(c10::IntArrayRef size, c10::ScalarType dtype) {
  static c10::Allocator* const allocator = c10::GetAllocator(c10::DeviceType::PrivateUse1);
  return at::detail::empty_generic(size, allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype,
                                   std::nullopt);
}

at::Tensor elementwise_output(c10::IntArrayRef size, c10::ScalarType dtype, TensorRefs operands) {
  const bool all_contiguous = std::all_of(operands.begin(), operands.end(), [](const at::Tensor& t) {
    return !t.defined() || t.is_contiguous();
  });
  if (all_contiguous) {
    return new_output(size, dtype);
  }
  // The layout is TensorIterator's to decide: it is asked over meta tensors of
  // the operands' sizes and strides (no memory, no kernel).
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).set_check_mem_overlap(false).resize_outputs(true);
  config.add_owned_output(at::Tensor());
  for (const at::Tensor& t : operands) {
    if (t.defined()) {
      config.add_owned_const_input(
          at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)));
    }
  }
  config.declare_static_dtype_and_device(dtype, c10::Device(c10::kMeta));
  const at::TensorIterator iterator = config.build();
  const at::Tensor& laid_out = iterator.output(0);
  TORCH_INTERNAL_ASSERT(laid_out.sizes() == size, "elementwise_output: the operands broadcast to ",
                        laid_out.sizes(), ", the adapter's rule to ", size);
  static c10::Allocator* const allocator = c10::GetAllocator(c10::DeviceType::PrivateUse1);
  return at::detail::empty_strided_generic(size, laid_out.strides(), allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

Shape same_shape(const at::Tensor& t) {
  return as_shape(t.sizes());
}

namespace {

// Broadcasts `shape` with `sizes` in place (right-aligned, as in NumPy); false if they do not fit.
bool broadcast_into(Shape& shape, c10::IntArrayRef sizes) {
  if (sizes.size() > shape.size()) {
    shape.insert(shape.begin(), sizes.size() - shape.size(), 1);
  }
  const size_t pad = shape.size() - sizes.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t& a = shape[pad + i];
    const int64_t b = sizes[i];
    if (a == b || b == 1) {
      continue;
    }
    if (a != 1) {
      return false;
    }
    a = b;
  }
  return true;
}

} // namespace

Shape broadcast_shapes(const char* op, std::initializer_list<const char*> args, TensorRefs tensors) {
  Shape shape;
  for (const at::Tensor& t : tensors) {
    if (broadcast_into(shape, t.sizes())) {
      continue;
    }
    // The error names the argument and those it failed to broadcast with.
    std::string shaped_by;
    Shape before;
    auto name = args.begin();
    for (const at::Tensor& u : tensors) {
      if (&u == &t) {
        TORCH_CHECK_VALUE(false, op, ": cannot broadcast argument '", *name, "' of shape ", t.sizes(), " with ",
                          shaped_by, " of shape ", c10::IntArrayRef(before));
      }
      broadcast_into(before, u.sizes());
      shaped_by += (shaped_by.empty() ? "'" : ", '") + std::string(*name) + "'";
      ++name;
    }
  }
  return shape;
}

Shape index_shape(const char* op, const char* self_arg, const at::Tensor& self, int64_t dim,
                  const char* index_arg, const at::Tensor& index) {
  const int64_t ndim = std::max<int64_t>(self.dim(), 1);
  TORCH_CHECK_INDEX(dim >= -ndim && dim < ndim, op, ": dimension ", dim, " is out of range for argument '",
                    self_arg, "' with ", self.dim(), " dimension(s)");
  Shape shape = as_shape(self.sizes());
  if (!shape.empty()) {
    shape[c10::maybe_wrap_dim(dim, self.dim())] = index.numel();
  } else {
    TORCH_CHECK_INDEX(index.numel() == 1, op, ": argument '", index_arg,
                      "' must hold one index to select from a 0-dim '", self_arg, "'");
  }
  return shape;
}

Shape reduced_shape(const char* op, const char* arg, const at::Tensor& t,
                    c10::IntArrayRef dims, bool keepdim) {
  const int64_t ndim = t.dim();
  std::vector<bool> reduce(ndim, dims.empty());
  for (int64_t d : dims) {
    TORCH_CHECK_INDEX(d >= -std::max<int64_t>(ndim, 1) && d < std::max<int64_t>(ndim, 1), op,
                      ": dimension ", d, " is out of range for argument '", arg, "' with ", ndim,
                      " dimension(s)");
    const int64_t wrapped = ndim == 0 ? 0 : c10::maybe_wrap_dim(d, ndim);
    if (ndim > 0) {
      TORCH_CHECK_VALUE(!reduce[wrapped] || dims.empty(), op, ": dimension ", d,
                        " appears more than once in the reduction of '", arg, "'");
      reduce[wrapped] = true;
    }
  }
  Shape shape;
  for (int64_t d = 0; d < ndim; ++d) {
    if (!reduce[d]) {
      shape.push_back(t.size(d));
    } else if (keepdim) {
      shape.push_back(1);
    }
  }
  return shape;
}

bool runs_natively(std::initializer_list<at::Tensor> tensors, c10::ScalarType dtype,
                   std::initializer_list<c10::ScalarType> supported) {
  bool dtype_ok = false;
  for (auto d : supported) {
    dtype_ok = dtype_ok || d == dtype;
  }
  if (!dtype_ok) {
    return false;
  }
  std::optional<c10::Device> device;
  for (const auto& t : tensors) {
    if (t.is_privateuseone()) {
      if (device && *device != t.device()) {
        return false;
      }
      device = t.device();
    } else if (!(t.is_cpu() && t.dim() == 0)) {
      return false;
    }
  }
  return device.has_value();
}

bool stub_runs_natively(std::initializer_list<at::Tensor> read, std::initializer_list<at::Tensor> written,
                        std::initializer_list<c10::ScalarType> supported) {
  auto supports = [&](c10::ScalarType dtype) {
    return std::find(supported.begin(), supported.end(), dtype) != supported.end();
  };
  std::optional<c10::Device> device;
  auto on_one_device = [&](const at::Tensor& t, bool may_be_host_number) {
    if (t.layout() != c10::kStrided) return false;
    if (t.is_privateuseone()) {
      if (device && *device != t.device()) return false;
      device = t.device();
      return true;
    }
    return may_be_host_number && t.is_cpu() && t.dim() == 0;
  };
  for (const auto& t : read) {
    if (!supports(t.scalar_type()) || !on_one_device(t, true)) return false;
  }
  for (const auto& t : written) {
    if (!(supports(t.scalar_type()) || t.scalar_type() == c10::kBool) || !on_one_device(t, false)) return false;
  }
  return device.has_value();
}

void check_one_device(const char* op, std::initializer_list<at::Tensor> tensors) {
  std::optional<c10::Device> device;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.is_privateuseone()) {
      continue;
    }
    // CUDA's words, so code that matches on them works here too.
    TORCH_CHECK(!device || *device == t.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ", *device, " and ",
                t.device(), "! (in ", op, ")");
    device = t.device();
  }
}

at::Tensor staged_to_device(const at::Tensor& host, c10::Device device, c10::ScalarType dtype) {
  // A non_blocking copy from pageable memory is staged at once (the caller may
  // reuse the tensor); a pinned one would be read later, so it is cloned first.
  const at::Tensor source = host.is_cpu() && is_pinned_data(host.storage().data_ptr()) ? host.clone() : host;
  return source.to(device, dtype, /*non_blocking=*/true);
}

c10::Device operands_device(std::initializer_list<at::Tensor> tensors) {
  for (const auto& t : tensors) {
    if (t.is_privateuseone()) {
      return t.device();
    }
  }
  TORCH_INTERNAL_ASSERT(false, "operands_device: no simhpu tensor among the operands");
}

at::Tensor as_operand(const at::Tensor& t, c10::Device device, c10::ScalarType dtype) {
  if (t.is_privateuseone() && t.scalar_type() != dtype) {
    const OwnWorkScope converted_as_the_part_reads;
    return t.to(dtype);
  }
  // A host scalar becomes the kernel's argument: staged and queued, as the
  // part takes it with the launch; no blocking transfer, so no host wait.
  return staged_to_device(t, device, dtype);
}

namespace {

// What a kernel reads of `t`: each distinct element once (a broadcast
// dimension, stride 0, is the same memory again), as launch pricing counts.
double distinct_bytes(const at::Tensor& t) {
  if (!t.defined() || t.dim() == 0) return 0;  // (a 0-dim operand is the kernel's argument)
  return distinct_elements(t.sizes(), t.strides()) * static_cast<double>(t.element_size());
}

} // namespace

void describe_reads_as_given(TensorRefs given, TensorRefs outputs, c10::ScalarType dtype) {
  if (!observers::watched()) return;
  const bool converted = std::any_of(given.begin(), given.end(), [&](const at::Tensor& t) {
    return t.defined() && t.is_privateuseone() && t.scalar_type() != dtype;
  });
  if (!converted) return;
  LaunchWork work;
  work.bytes = 0;
  for (const at::Tensor& t : given) work.bytes += distinct_bytes(t);
  for (const at::Tensor& t : outputs) work.bytes += distinct_bytes(t);
  describe_next_launch(work);
}

} // namespace simhpu::rules
