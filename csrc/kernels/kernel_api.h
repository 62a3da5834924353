#pragma once
// What a device kernel author includes. A kernel is a plain C++ function over
// DeviceTensor descriptors and values, registered by name with SIMHPU_KERNEL:
//
//   void add_custom(const DeviceTensor& x, const DeviceTensor& y, const DeviceTensor& out) {...}
//   SIMHPU_KERNEL(add_custom);
//
// Adapters launch it with EXEC_CMD(add_custom, x, y, out); the arguments are
// matched by position. SIMHPU_KERNEL checks the kernel's parameters against
// every exec: entry that launches it (generated/kernel_signatures.h), so a
// mismatch with the YAML is a compile error naming the entry; hand-written
// launches are checked when they run. An operator package without YAML has no
// generated/kernel_signatures.h; its kernels are checked when they run.
#include "runtime/kernel_registry.h"

#if __has_include("generated/kernel_signatures.h")
#include "generated/kernel_signatures.h"
#define SIMHPU_CHECK_EXEC_ENTRIES(name) SIMHPU_EXEC_ENTRIES_##name(name)
#else
#define SIMHPU_CHECK_EXEC_ENTRIES(name) static_assert(true)
#endif

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/util/Exception.h>

#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace simhpu {
namespace detail {

template <typename T>
const char* kernel_type_name() {
  if constexpr (std::is_same_v<T, DeviceTensor>) return "Tensor";
  else if constexpr (std::is_same_v<T, int64_t>) return "int";
  else if constexpr (std::is_same_v<T, double>) return "float";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, c10::Scalar>) return "Scalar";
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "int[]";
  else if constexpr (std::is_same_v<T, c10::ScalarType>) return "ScalarType";
  else if constexpr (std::is_same_v<T, std::string>) return "str";
  else if constexpr (std::is_same_v<T, std::vector<DeviceTensor>>) return "Tensor[]";
  else return "?";
}

// Converts the variant in a launch record into the kernel's parameter type.
template <typename Param>
struct ArgFrom {
  using Value = std::decay_t<Param>;
  static const Value& get(const KernelArg& arg, size_t index) {
    const Value* value = std::get_if<Value>(&arg);
    TORCH_CHECK(value != nullptr, "argument ", index, " should be ", kernel_type_name<Value>());
    return *value;
  }
};

template <>
struct ArgFrom<c10::IntArrayRef> {
  static c10::IntArrayRef get(const KernelArg& arg, size_t index) {
    return ArgFrom<std::vector<int64_t>>::get(arg, index);
  }
};

// std::optional<T> parameters (by value or const reference) accept None.
template <typename T>
struct ArgFrom<std::optional<T>> {
  static std::optional<T> get(const KernelArg& arg, size_t index) {
    if (std::holds_alternative<NoneArg>(arg)) {
      return std::nullopt;
    }
    return ArgFrom<T>::get(arg, index);
  }
};

template <typename T>
struct ArgFrom<const std::optional<T>&> : ArgFrom<std::optional<T>> {};

template <typename Fn>
struct KernelParams;

template <typename... Params>
struct KernelParams<void(Params...)> {
  template <typename... Accepted>
  static constexpr bool take() {
    if constexpr (sizeof...(Params) != sizeof...(Accepted)) {
      return false;
    } else {
      return (Accepted::template holds<std::remove_cv_t<std::remove_reference_t<Params>>>() && ...);
    }
  }
};

template <auto Fn>
struct KernelInvoker;

template <typename... Params, void (*Fn)(Params...)>
struct KernelInvoker<Fn> {
  static void run(KernelArgs& args) {
    TORCH_CHECK(args.size() == sizeof...(Params), "launched with ", args.size(),
                " arguments, the kernel takes ", sizeof...(Params));
    call(args, std::index_sequence_for<Params...>{});
  }

  template <size_t... I>
  static void call(KernelArgs& args, std::index_sequence<I...>) {
    Fn(ArgFrom<Params>::get(args[I], I)...);
  }
};

} // namespace detail

// The parameter types that take one argument of an exec: entry (see generated/kernel_signatures.h).
template <typename... Types>
struct OneOf {
  template <typename Param>
  static constexpr bool holds() {
    return (std::is_same_v<Param, Types> || ...);
  }
};

// True when a kernel of type Fn has one parameter per OneOf, each of a type it lists.
template <typename Fn, typename... Accepted>
constexpr bool kernel_takes() {
  return detail::KernelParams<Fn>::template take<Accepted...>();
}

} // namespace simhpu

#define SIMHPU_KERNEL(name)                                     \
  SIMHPU_CHECK_EXEC_ENTRIES(name);                              \
  static const ::simhpu::KernelRegistrar simhpu_kernel_##name( \
      #name, &::simhpu::detail::KernelInvoker<&name>::run, SIMHPU_THIS_BUILD)

// The dtypes device kernels are instantiated for, unless a kernel says otherwise.
#define SIMHPU_DISPATCH_FLOATING(dtype, kernel_name, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, kernel_name, __VA_ARGS__)
