#pragma once
// EXEC_CMD(kernel, args...): launch the device kernel `kernel` with `args` on
// the current stream of the current device. Tensor arguments become DeviceTensor descriptors
// and their storages are kept alive until the kernel has run; other arguments
// are copied by value. The launching function's name (__func__) is recorded so
// a failure names the operator.
#include "aten/op_routes.h"
#include "runtime/device.h"
#include "runtime/kernel_registry.h"
#include "runtime/streams.h"

#include <ATen/core/Tensor.h>

#include <optional>

namespace simhpu {

// Marks a tensor argument the kernel writes (an output). A launch that marks
// none is assumed to write every tensor it takes: after a failure, what it
// writes is what must not be read (see runtime/undefined_memory.h).
struct Written {
  const at::Tensor& tensor;
};
inline Written written(const at::Tensor& t) {
  return Written{t};
}

// The same for a list of outputs, passed to the kernel as one Tensor[] argument.
struct WrittenList {
  at::TensorList tensors;
};
inline WrittenList written(at::TensorList tensors) {
  return WrittenList{tensors};
}

namespace detail {

// Each tensor names its storage's slot, so what the launch touches is known by
// span (the sanitizer: disjoint slices of one storage do not conflict).
inline DeviceTensor describe_kept(LaunchRecord& r, const at::Tensor& t) {
  DeviceTensor d = describe_tensor(t);
  d.storage_slot = static_cast<int32_t>(r.keep_alive.size());
  r.keep_alive.push_back(t.storage());
  return d;
}
inline void add_arg(LaunchRecord& r, const at::Tensor& t) {
  r.args.emplace_back(describe_kept(r, t));
}
inline void add_arg(LaunchRecord& r, at::TensorList list) {
  std::vector<DeviceTensor> descriptors;
  descriptors.reserve(list.size());
  for (const auto& t : list) {
    descriptors.push_back(describe_kept(r, t));
  }
  r.args.emplace_back(std::move(descriptors));
}
inline void add_arg(LaunchRecord& r, const Written& w) {
  add_arg(r, w.tensor);
  r.mark_written(static_cast<int64_t>(r.keep_alive.size()) - 1);
}
inline void add_arg(LaunchRecord& r, const WrittenList& w) {
  add_arg(r, w.tensors);
  for (size_t i = 0; i < w.tensors.size(); ++i) {
    r.mark_written(static_cast<int64_t>(r.keep_alive.size() - w.tensors.size() + i));
  }
}
inline void add_arg(LaunchRecord& r, const c10::Scalar& s) { r.args.emplace_back(s); }
inline void add_arg(LaunchRecord& r, double v) { r.args.emplace_back(v); }
inline void add_arg(LaunchRecord& r, int64_t v) { r.args.emplace_back(v); }
inline void add_arg(LaunchRecord& r, const c10::SymInt& v) { r.args.emplace_back(v.expect_int()); }
inline void add_arg(LaunchRecord& r, bool v) { r.args.emplace_back(v); }
inline void add_arg(LaunchRecord& r, c10::ScalarType v) { r.args.emplace_back(v); }
inline void add_arg(LaunchRecord& r, c10::string_view v) { r.args.emplace_back(std::string(v)); }
inline void add_arg(LaunchRecord& r, c10::IntArrayRef v) {
  r.args.emplace_back(std::vector<int64_t>(v.begin(), v.end()));
}
inline void add_arg(LaunchRecord& r, c10::SymIntArrayRef v) {
  add_arg(r, C10_AS_INTARRAYREF_SLOW(v));
}
// An optional list that is None reaches the kernel as NoneArg, as any optional does.
inline void add_arg(LaunchRecord& r, at::OptionalIntArrayRef v) {
  if (v.has_value()) {
    add_arg(r, *v);
  } else {
    r.args.emplace_back(NoneArg{});
  }
}
inline void add_arg(LaunchRecord& r, at::OptionalSymIntArrayRef v) {
  if (v.has_value()) {
    add_arg(r, *v);
  } else {
    r.args.emplace_back(NoneArg{});
  }
}
// An optional argument that is None reaches the kernel as NoneArg.
template <typename T>
void add_arg(LaunchRecord& r, const std::optional<T>& v) {
  if (v.has_value()) {
    add_arg(r, *v);
  } else {
    r.args.emplace_back(NoneArg{});
  }
}
inline void add_arg(LaunchRecord& r, const std::optional<at::Tensor>& t) {
  if (t.has_value() && t->defined()) {
    add_arg(r, *t);
  } else {
    r.args.emplace_back(NoneArg{});
  }
}

} // namespace detail

template <typename... Args>
void launch(const KernelDef& kernel, const char* op_name, const Args&... args) {
  // The site first: capturing it may take the GIL, which must not happen
  // while this thread holds a stream's producer lock.
  const LaunchSite site = capture_launch_site();
  LaunchSlot slot(current_device());
  LaunchRecord& record = slot.record();
  record.kernel = &kernel;
  record.op_name = op_name;
  record.site = site;
  (detail::add_arg(record, args), ...);
  slot.commit();
  count_route(op_name, Route::Dedicated);
}

} // namespace simhpu

// Looks the kernel up once per call site, on first use.
// A failed lookup is not remembered: the next call looks again (a library
// that registers the kernel may have been loaded since).
#define SIMHPU_KERNEL_REF(kernel, op_name)                                             \
  ([](const char* op) -> const ::simhpu::KernelDef& {                                  \
    static const ::simhpu::KernelDef& def = ::simhpu::find_kernel(#kernel, op);        \
    return def;                                                                        \
  }(op_name))

#define EXEC_CMD(kernel, ...) \
  ::simhpu::launch(SIMHPU_KERNEL_REF(kernel, __func__), __func__, __VA_ARGS__)

// The same, naming the operator explicitly (generated adapters pass kOpName).
#define EXEC_CMD_FOR(op_name, kernel, ...) \
  ::simhpu::launch(SIMHPU_KERNEL_REF(kernel, op_name), op_name, __VA_ARGS__)
