#pragma once
// What a device kernel author includes. A kernel is a plain C++ function over
// DeviceTensor descriptors and values, registered by name with SIMHPU_KERNEL:
//
//   void add_custom(const DeviceTensor& x, const DeviceTensor& y, const DeviceTensor& out) {...}
//   SIMHPU_KERNEL(add_custom);
//
// Adapters launch it with EXEC_CMD(add_custom, x, y, out); the arguments are
// matched by position. What a kernel writes is a parameter of type Out<T>
// (below): codegen, the compiler and the runtime hold launches to it. A kernel's file includes generated/kernel_signatures/NAME.h
// (codegen check asks for it when an exec: entry launches NAME): SIMHPU_KERNEL
// then checks the kernel's parameters against every exec: entry that launches
// it, so a mismatch with the YAML is one compile error naming the entry. Kernels
// without the header (an operator package without YAML) are checked when they
// run; so are hand-written launches.
#include "runtime/kernel_registry.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/util/Exception.h>

#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace simhpu {

// A parameter the kernel writes (an output; it may read it too):
//   void add_custom(const DeviceTensor& x, const DeviceTensor& y, const Out<DeviceTensor>& out)
// Out<std::vector<DeviceTensor>> is a list of outputs. It is the descriptor
// itself, so it is used as one; the type is what says which arguments a
// kernel writes: an exec: entry must pass its outputs there and only there
// (codegen check, and the compiler through generated/kernel_signatures/), a
// launch that marks its outputs with written() must mark exactly these, and a
// launch that marks none is taken to write exactly these (the sanitizer and
// a failure's undefined memory go by it).
template <typename T>
struct Out : T {};

namespace detail {

template <typename T>
struct IsOut : std::false_type {};
template <typename T>
struct IsOut<Out<T>> : std::true_type {};

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

// The launch record holds the descriptor; the kernel receives a copy typed as its output.
template <typename T>
struct ArgFrom<Out<T>> {
  static Out<T> get(const KernelArg& arg, size_t index) { return Out<T>{ArgFrom<T>::get(arg, index)}; }
};

template <typename T>
struct ArgFrom<const Out<T>&> : ArgFrom<Out<T>> {};

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

  // What the runtime checks launches against: the parameter count, and bit i
  // set when parameter i is an Out<T>.
  static constexpr KernelSignature signature() {
    constexpr bool is_out[] = {IsOut<std::remove_cv_t<std::remove_reference_t<Params>>>::value..., false};
    uint64_t outputs = 0;
    for (size_t i = 0; i < sizeof...(Params) && i < 64; ++i) {
      outputs |= is_out[i] ? uint64_t(1) << i : 0;
    }
    return KernelSignature{static_cast<int32_t>(sizeof...(Params)), outputs};
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

// The parameter types that take one argument of an exec: entry (see generated/kernel_signatures/).
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

// A kernel's name as a template argument: ExecEntries<"swish">.
template <size_t N>
struct KernelName {
  char text[N];
  constexpr KernelName(const char (&name)[N]) {  // NOLINT: converts from the string literal
    for (size_t i = 0; i < N; ++i) text[i] = name[i];
  }
};

// The exec: entries that launch a kernel. Without its generated header there
// is nothing to check; generated/kernel_signatures/NAME.h specialises this with
// one static_assert per entry, whose message is the entry's file:line.
template <KernelName Name>
struct ExecEntries {
  template <typename Fn>
  static constexpr bool fit() {
    return true;
  }
};

namespace detail {

// The invoker of a kernel that fits its entries. A kernel that does not fit
// has failed its static_assert already; not instantiating its invoker keeps
// that one line the whole error.
template <auto Fn, bool Fits>
constexpr KernelFn invoker_if_fits() {
  if constexpr (Fits) {
    return &KernelInvoker<Fn>::run;
  } else {
    return nullptr;
  }
}

} // namespace detail
} // namespace simhpu

#define SIMHPU_KERNEL(name)                                                                      \
  static const ::simhpu::KernelRegistrar simhpu_kernel_##name(                                   \
      #name,                                                                                     \
      ::simhpu::detail::invoker_if_fits<&name,                                                   \
                                        ::simhpu::ExecEntries<#name>::template fit<decltype(name)>()>(), \
      ::simhpu::detail::KernelParams<decltype(name)>::signature(), SIMHPU_THIS_BUILD)

// The dtypes device kernels are instantiated for, unless a kernel says otherwise.
#define SIMHPU_DISPATCH_FLOATING(dtype, kernel_name, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, kernel_name, __VA_ARGS__)
