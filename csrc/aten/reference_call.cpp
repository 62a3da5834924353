#include "aten/reference_call.h"

#include "aten/reduced_precision.h"
#include "aten/result_placement.h"
#include "runtime/capture.h"
#include "runtime/device_memory.h"
#include "runtime/generator.h"
#include "runtime/launch_site.h"
#include "runtime/observers.h"
#include "runtime/streams.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/List.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <mutex>

namespace simhpu {
namespace {

// The index of `storage` in the record's keep_alive, adding it if new: tensors
// sharing a storage share a slot, so the kernel sees them share memory.
int32_t storage_slot(LaunchRecord& record, const c10::Storage& storage) {
  for (size_t i = 0; i < record.keep_alive.size(); ++i) {
    if (record.keep_alive[i].is_alias_of(storage)) {
      return static_cast<int32_t>(i);
    }
  }
  record.keep_alive.push_back(storage);
  return static_cast<int32_t>(record.keep_alive.size() - 1);
}

// Tensors seen while encoding one record, so a tensor passed twice is encoded
// as the same tensor (see DeviceTensor::same_as).
using SeenTensors = c10::SmallVector<const c10::TensorImpl*, 8>;

DeviceTensor describe_in_record(LaunchRecord& record, const at::Tensor& t, SeenTensors& seen) {
  if (!t.defined()) {
    return DeviceTensor{};  // dtype Undefined: None
  }
  DeviceTensor d = describe_tensor(t);
  d.storage_slot = storage_slot(record, t.storage());
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] == t.unsafeGetTensorImpl()) {
      d.same_as = static_cast<int32_t>(i);
      break;
    }
  }
  seen.push_back(t.unsafeGetTensorImpl());
  return d;
}

// A CPU tensor holding a copy of a host scalar: the caller may change the
// original after the launch returns, the kernel must see today's value.
at::Tensor snapshot(const at::Tensor& t) {
  at::Tensor copy = t.clone();
  copy.unsafeGetTensorImpl()->set_wrapped_number(t.unsafeGetTensorImpl()->is_wrapped_number());
  return copy;
}

// How many random numbers a launch asks its generator for: CUDA's kernels move
// the Philox offset by about one number per element they write, and the
// largest tensor an operator is given is the one it fills.
uint64_t random_numbers_wanted(c10::ArrayRef<c10::IValue> args) {
  uint64_t numbers = 0;
  for (const c10::IValue& arg : args) {
    if (arg.isTensor() && arg.toTensor().defined()) {
      numbers = std::max<uint64_t>(numbers, static_cast<uint64_t>(arg.toTensor().numel()));
    }
  }
  return numbers;
}

// Random ops draw from the device's generator, in launch order: each launch
// takes a seed from it (moving its offset on) and gives the kernel a CPU engine
// of its own. In a graph capture, each replay seeds that engine afresh.
c10::IValue generator_for_launch(const ReferenceOp& ref, const c10::IValue& given, c10::Device device,
                                 uint64_t numbers) {
  at::Generator chosen = given.isNone() ? default_generator(device.index()) : given.toGenerator();
  TORCH_CHECK(chosen.device() == device, ref.name, ": expected a generator of ", device, ", got one of ",
              chosen.device());
  at::Generator engine = at::make_generator<at::CPUGeneratorImpl>();
  if (!capture_random_draw(CapturedRandomDraw{chosen, engine, numbers})) {
    engine.set_current_seed(take_launch_seed(chosen, numbers));
  }
  return c10::IValue(std::move(engine));
}

// The worker's side: CPU storages over the record's device storages, made on first use.
class HostAliases {
 public:
  explicit HostAliases(const LaunchRecord& record) : record_(record), storages_(record.keep_alive.size()) {}

  at::Tensor tensor(const DeviceTensor& d) {
    if (d.dtype == c10::ScalarType::Undefined) {
      return at::Tensor();
    }
    if (d.same_as >= 0) {
      made_.push_back(made_[d.same_as]);
      return made_.back();
    }
    made_.push_back(fresh_tensor(d));
    return made_.back();
  }

 private:
  at::Tensor fresh_tensor(const DeviceTensor& d) {
    TORCH_INTERNAL_ASSERT(d.storage_slot >= 0, "reference call: a tensor without a storage slot");
    c10::Storage& storage = storages_[d.storage_slot];
    if (!storage) {
      storage = host_storage(d.storage_slot);
    }
    auto impl = c10::make_intrusive<c10::TensorImpl>(
        c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), c10::scalarTypeToTypeMeta(d.dtype));
    impl->set_sizes_and_strides(d.sizes, d.strides, d.storage_offset);
    at::Tensor t(std::move(impl));
    t._set_conj(d.conj);
    t._set_neg(d.neg);
    return t;
  }

 public:
  c10::IValue value(const KernelArg& arg, ReferenceOp::Arg kind) {
    if (const auto* d = std::get_if<DeviceTensor>(&arg)) {
      return tensor(*d);
    }
    if (const auto* list = std::get_if<std::vector<DeviceTensor>>(&arg)) {
      if (kind == ReferenceOp::Arg::OptionalTensorList) {
        c10::List<std::optional<at::Tensor>> out;
        for (const auto& d : *list) {
          at::Tensor t = tensor(d);
          out.push_back(t.defined() ? std::optional<at::Tensor>(t) : std::nullopt);
        }
        return out;
      }
      c10::List<at::Tensor> out;
      for (const auto& d : *list) {
        out.push_back(tensor(d));
      }
      return out;
    }
    if (const auto* v = std::get_if<c10::IValue>(&arg)) {
      return *v;
    }
    TORCH_INTERNAL_ASSERT(std::holds_alternative<NoneArg>(arg), "reference call: unexpected argument");
    return c10::IValue();
  }

  // A CPU storage over the memory a slot's storage had when the launch was
  // made; not resizable: a CPU kernel growing it would otherwise move the data
  // off the device unnoticed. The storage itself may have been resized since
  // (FSDP frees a parameter's memory with resize_(0) while kernels that read
  // it are queued): a resize always takes a new block, so a storage that still
  // starts where the launch's tensors say has its launch-time size; one that
  // moved is seen as far as the launch's tensors reach into its old memory.
  c10::Storage host_storage(int32_t slot) const {
    char* base = nullptr;
    size_t reach = 0;
    for_each_descriptor([&](const DeviceTensor& d) {
      if (d.storage_slot != slot || d.dtype == c10::ScalarType::Undefined || d.data == nullptr) return;
      const size_t item = c10::elementSize(d.dtype);
      base = static_cast<char*>(d.data) - d.storage_offset * static_cast<int64_t>(item);
      reach = std::max(reach, at::detail::computeStorageNbytes(d.sizes, d.strides, item, d.storage_offset));
    });
    const c10::Storage& device_storage = record_.keep_alive[slot];
    const void* now = device_storage.data();
    if (now == nullptr || host_address(device_storage.device().index(), now) == base) {
      base = now == nullptr ? nullptr : static_cast<char*>(host_address(device_storage.device().index(), now));
      reach = device_storage.nbytes();
    }
    return c10::Storage(c10::Storage::use_byte_size_t(), reach, c10::DataPtr(base, c10::Device(c10::kCPU)),
                        /*allocator=*/nullptr, /*resizable=*/false);
  }

  template <typename F>
  void for_each_descriptor(F&& visit) const {
    for (const KernelArg& arg : record_.args) {
      if (const auto* d = std::get_if<DeviceTensor>(&arg)) {
        visit(*d);
      } else if (const auto* list = std::get_if<std::vector<DeviceTensor>>(&arg)) {
        for (const auto& e : *list) visit(e);
      }
    }
  }

 private:
  const LaunchRecord& record_;
  std::vector<c10::Storage> storages_;
  std::vector<at::Tensor> made_;  // in encoding order, for DeviceTensor::same_as
};

// The outputs were shaped by the meta kernel before the CPU kernel ran; if the
// two disagree, copy_ might broadcast or convert silently, so it is an error.
// `rounded_to`: the reduced dtype a promoted call's float32 results are rounded to (see reduced_precision.h).
void fill(const ReferenceOp& ref, at::Tensor destination, const at::Tensor& result, c10::ScalarType rounded_to) {
  if (!result.defined() || !destination.defined()) {
    TORCH_CHECK(result.defined() == destination.defined() || (destination.defined() && destination.numel() == 0),
                ref.name, ": its meta kernel and its CPU kernel disagree on whether an output exists");
    return;
  }
  const bool rounded = result.scalar_type() == at::kFloat && destination.scalar_type() == rounded_to;
  TORCH_CHECK(destination.sizes() == result.sizes() && (destination.scalar_type() == result.scalar_type() || rounded),
              ref.name, ": its meta kernel promised an output of shape ", destination.sizes(), " and dtype ",
              destination.scalar_type(), ", its CPU kernel made one of shape ", result.sizes(), " and dtype ",
              result.scalar_type(), " (simhpu runs such calls synchronised once they are known: see "
              "meta_differs_for in csrc/aten/reference_op.cpp)");
  destination.copy_(result);
}

void copy_into(const ReferenceOp& ref, HostAliases& aliases, const KernelArg& destination, const c10::IValue& result,
               c10::ScalarType rounded_to) {
  if (const auto* d = std::get_if<DeviceTensor>(&destination)) {
    if (result.isTensor()) {
      fill(ref, aliases.tensor(*d), result.toTensor(), rounded_to);
    }
  } else if (const auto* list = std::get_if<std::vector<DeviceTensor>>(&destination)) {
    const auto results = result.toTensorVector();
    TORCH_CHECK(results.size() == list->size(), ref.name, ": its meta kernel promised ", list->size(),
                " outputs, its CPU kernel made ", results.size());
    for (size_t i = 0; i < list->size(); ++i) {
      fill(ref, aliases.tensor((*list)[i]), results[i], rounded_to);
    }
  }
}

void run_reference_record(LaunchRecord& record) {
  run_reference_call(record, /*fill_outputs=*/true);
}

} // namespace

const KernelDef& reference_kernel() {
  static const KernelDef def{"reference", nullptr, &run_reference_record};
  return def;
}

void begin_reference_record(LaunchRecord& record, const ReferenceOp& ref) {
  record.kernel = &reference_kernel();
  record.op_name = ref.name.c_str();
  record.payload = &ref;
}

void encode_arguments(LaunchRecord& record, const ReferenceOp& ref, c10::ArrayRef<c10::IValue> args,
                      c10::Device device, bool snapshot_host_tensors) {
  SeenTensors seen;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& arg = args[i];
    switch (ref.args[i]) {
      case ReferenceOp::Arg::Tensor:
        if (!arg.isTensor() || !arg.toTensor().defined()) {
          record.args.emplace_back(NoneArg{});
        } else if (arg.toTensor().is_privateuseone()) {
          record.args.emplace_back(describe_in_record(record, arg.toTensor(), seen));
          if (ref.arg_written[i] || ref.writes_unannounced(i, args)) {
            record.mark_written(std::get<DeviceTensor>(record.args.back()).storage_slot);
          }
        } else {
          record.args.emplace_back(c10::IValue(snapshot_host_tensors ? snapshot(arg.toTensor()) : arg.toTensor()));
        }
        break;
      case ReferenceOp::Arg::TensorList:
      case ReferenceOp::Arg::OptionalTensorList: {
        if (arg.isNone()) {
          record.args.emplace_back(NoneArg{});
          break;
        }
        std::vector<DeviceTensor> list;
        for (const c10::IValue& element : arg.toListRef()) {
          list.push_back(element.isTensor() ? describe_in_record(record, element.toTensor(), seen) : DeviceTensor{});
          if (ref.arg_written[i]) {
            record.mark_written(list.back().storage_slot);
          }
        }
        record.args.emplace_back(std::move(list));
        break;
      }
      case ReferenceOp::Arg::Generator:
        record.args.emplace_back(generator_for_launch(ref, arg, device, random_numbers_wanted(args)));
        break;
      case ReferenceOp::Arg::ScalarType:
      case ReferenceOp::Arg::Other:
        if (arg.isDevice() && arg.toDevice().is_privateuseone()) {
          record.args.emplace_back(c10::IValue(c10::Device(c10::kCPU)));
        } else {
          record.args.emplace_back(arg);
        }
        break;
    }
  }
}

void launch_reference_call(const ReferenceOp& ref, torch::jit::Stack* stack, c10::Device device,
                           std::vector<c10::IValue> results, const std::vector<c10::IValue>& fresh_outputs) {
  const auto args = c10::ArrayRef<c10::IValue>(*stack).slice(stack->size() - ref.num_args(), ref.num_args());
  const LaunchSite site = capture_launch_site();  // before the slot: it may take the GIL
  observers::on_reference_op(ref.op, args, results);  // (before the slot: describing the work may take the GIL too)
  {
    LaunchSlot slot(device.index());
    LaunchRecord& record = slot.record();
    begin_reference_record(record, ref);
    record.site = site;
    encode_arguments(record, ref, args, device);
    encode_outputs(record, fresh_outputs);
    slot.commit();
  }
  torch::jit::drop(*stack, ref.num_args());
  for (auto& r : results) stack->push_back(std::move(r));
}

void encode_outputs(LaunchRecord& record, c10::ArrayRef<c10::IValue> outputs) {
  SeenTensors seen;  // fresh outputs: never the same as an argument
  for (const c10::IValue& out : outputs) {
    if (out.isTensor()) {
      record.args.emplace_back(describe_in_record(record, out.toTensor(), seen));
      record.mark_written(std::get<DeviceTensor>(record.args.back()).storage_slot);
    } else if (out.isTensorList()) {
      std::vector<DeviceTensor> list;
      for (const at::Tensor& t : out.toTensorVector()) {
        list.push_back(describe_in_record(record, t, seen));
        record.mark_written(list.back().storage_slot);
      }
      record.args.emplace_back(std::move(list));
    } else {
      record.args.emplace_back(NoneArg{});  // not a tensor: nothing to fill
    }
  }
}

namespace {

// The fresh outputs' memory, offered to the CPU kernel's allocations (see result_placement.h).
std::optional<ResultPlacement> offer_outputs(const ReferenceOp& ref, const LaunchRecord& record) {
  if (!result_placement_available()) return std::nullopt;
  c10::SmallVector<ResultOffer, 2> offers;
  size_t next_output = ref.num_args();
  for (size_t r = 0; r < ref.return_alias.size(); ++r) {
    if (ref.return_alias[r] >= 0) continue;
    const auto* d = std::get_if<DeviceTensor>(&record.args[next_output++]);
    if (d != nullptr && d->dtype != c10::ScalarType::Undefined && d->numel() > 0 && d->is_contiguous()) {
      offers.push_back({d->data, static_cast<size_t>(d->numel()) * c10::elementSize(d->dtype)});
    }
  }
  if (offers.empty()) return std::nullopt;
  return std::optional<ResultPlacement>(std::in_place, std::move(offers));
}

bool placed_as(const at::Tensor& result, const KernelArg& output) {
  const auto* d = std::get_if<DeviceTensor>(&output);
  return d != nullptr && result.defined() && result.data_ptr() == d->data && result.scalar_type() == d->dtype &&
         result.sizes() == c10::IntArrayRef(d->sizes) && result.strides() == c10::IntArrayRef(d->strides);
}

// A result in offered memory that is not exactly its own output (another
// output's memory, another layout) is moved out before any output is written.
c10::IValue moved_out_of_offers(const ResultPlacement& placement, const c10::IValue& result) {
  if (result.isTensor()) {
    const at::Tensor& t = result.toTensor();
    return placement.overlaps_offer(t) ? c10::IValue(t.clone()) : result;
  }
  if (result.isTensorList()) {
    std::vector<at::Tensor> list = result.toTensorVector();
    for (at::Tensor& t : list) {
      if (placement.overlaps_offer(t)) t = t.clone();
    }
    return c10::IValue(list);
  }
  return result;
}

} // namespace

torch::jit::Stack run_reference_call(LaunchRecord& record, bool fill_outputs) {
  const auto& ref = *static_cast<const ReferenceOp*>(record.payload);
  // Operators the CPU kernel calls inside need no autograd: these are plain buffers.
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  HostAliases aliases(record);
  // (Before the stack: the results it holds are released before the offers are checked.)
  std::optional<ResultPlacement> placement = fill_outputs ? offer_outputs(ref, record) : std::nullopt;
  torch::jit::Stack stack;
  stack.reserve(record.args.size());
  const size_t num_args = ref.num_args();
  c10::SmallVector<std::pair<at::Tensor, const DeviceTensor*>, 2> written;
  for (size_t i = 0; i < num_args; ++i) {
    stack.push_back(aliases.value(record.args[i], ref.args[i]));
    const auto* d = std::get_if<DeviceTensor>(&record.args[i]);
    if (ref.arg_written[i] && d != nullptr && stack.back().isTensor()) {
      written.emplace_back(stack.back().toTensor(), d);
    }
  }
  const FloatPromotion promotion(ref, stack);
  const c10::DispatchKeySet cpu(c10::DispatchKey::CPU);
  ref.op.redispatchBoxed(cpu, &stack);
  promotion.write_back();
  if (!fill_outputs) {
    promotion.round_results(stack, ref.return_alias.size());
    return stack;
  }
  c10::SmallVector<bool, 4> in_place(ref.return_alias.size(), false);
  if (placement) {
    placement->withdraw();
    size_t next = num_args;
    for (size_t r = 0; r < ref.return_alias.size(); ++r) {
      if (ref.return_alias[r] >= 0) continue;
      const KernelArg& output = record.args[next++];
      in_place[r] = stack[r].isTensor() && placed_as(stack[r].toTensor(), output);
      if (!in_place[r]) stack[r] = moved_out_of_offers(*placement, stack[r]);
    }
  }
  // The host gave these tensors the metadata the meta kernel announced; a
  // CPU kernel that reshapes them otherwise would leave the two disagreeing.
  for (const auto& [alias, d] : written) {
    const bool strides_matter = alias.numel() > 0;
    TORCH_CHECK(alias.sizes() == c10::IntArrayRef(d->sizes) &&
                    (!strides_matter || alias.strides() == c10::IntArrayRef(d->strides)),
                ref.name, ": its CPU kernel reshaped a written argument to ", alias.sizes(), " (strides ",
                alias.strides(), "), where its meta kernel announced ", c10::IntArrayRef(d->sizes), " (strides ",
                c10::IntArrayRef(d->strides), ")");
  }
  size_t next_output = num_args;
  for (size_t r = 0; r < ref.return_alias.size(); ++r) {
    if (ref.return_alias[r] < 0) {
      const KernelArg& output = record.args[next_output++];
      if (!in_place[r]) copy_into(ref, aliases, output, stack[r], promotion.reduced());  // (in place: written where it belongs)
    }
  }
  return {};
}

} // namespace simhpu
