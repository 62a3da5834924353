#include "python/simclock.h"

#include "simclock/joined_clocks.h"
#include "simclock/sim_clock.h"

#include <torch/csrc/utils/pybind.h>

#include <pybind11/stl.h>

#include <unordered_map>

namespace py = pybind11;

namespace simhpu {

namespace {

using simclock::DeviceProfile;

// Rates by dtype, from {torch.dtype: FLOP/s}; every dtype must be given (Python fills the defaults).
void fill_rates(std::array<double, static_cast<size_t>(c10::ScalarType::NumOptions)>& rates, const py::dict& given) {
  for (const auto& [dtype, rate] : given) {
    rates[static_cast<size_t>(dtype.cast<c10::ScalarType>())] = rate.cast<double>();
  }
}

simclock::Link link_of(const py::dict& d) {
  return simclock::Link{d["bandwidth"].cast<double>(), d["latency"].cast<double>()};
}

// The profile as torch_simhpu.simulation validated it (numbers in seconds, bytes, FLOP/s).
DeviceProfile profile_of(const py::dict& d) {
  DeviceProfile p;
  p.name = d["name"].cast<std::string>();
  fill_rates(p.matrix_flops, d["matrix_flops"].cast<py::dict>());
  fill_rates(p.vector_flops, d["vector_flops"].cast<py::dict>());
  p.memory_bandwidth = d["memory_bandwidth"].cast<double>();
  p.kernel_overhead = d["kernel_overhead"].cast<double>();
  p.launch_latency = d["launch_latency"].cast<double>();
  p.host_op_overhead = d["host_op_overhead"].cast<double>();
  p.host_launch_overhead = d["host_launch_overhead"].cast<double>();
  p.sync_latency = d["sync_latency"].cast<double>();
  p.synchronous_launches = d["synchronous_launches"].cast<bool>();
  p.host_autograd_overhead = d["host_autograd_overhead"].cast<double>();
  p.host_python_line = d["host_python_line"].cast<double>();
  p.host_convolution_overhead = d["host_convolution_overhead"].cast<double>();
  p.host_convolution_backward_overhead = d["host_convolution_backward_overhead"].cast<double>();
  p.convolution_floor = d["convolution_floor"].cast<double>();
  p.convolution_layout_conversion = d["convolution_layout_conversion"].cast<double>();
  p.strided_elementwise = d["strided_elementwise"].cast<double>();
  const auto host_link = d["host_link"].cast<py::dict>();
  p.host_link = link_of(host_link);
  p.pageable_bandwidth = host_link["pageable_bandwidth"].cast<double>();
  const auto fabric = d["fabric"].cast<py::dict>();
  p.devices_per_node = fabric["devices_per_node"].cast<int>();
  p.intra_node = link_of(fabric["intra_node"].cast<py::dict>());
  p.inter_node = link_of(fabric["inter_node"].cast<py::dict>());
  p.switch_reduction_bandwidth = fabric["switch_reduction_bandwidth"].cast<double>();
  p.switch_reduction_latency = fabric["switch_reduction_latency"].cast<double>();
  p.pipeline_fill = fabric["pipeline_fill"].cast<double>();
  for (const auto& given : fabric["protocols"].cast<py::list>()) {
    const auto protocol = given.cast<py::dict>();
    p.protocols.push_back({protocol["base_latency"].cast<double>(), protocol["intra_hop"].cast<double>(),
                           protocol["inter_hop"].cast<double>(), protocol["bandwidth"].cast<double>()});
  }
  if (d.contains("matrix_units")) {
    const auto units = d["matrix_units"].cast<py::dict>();
    p.matrix_units = units["count"].cast<int>();
    for (const auto& tile : units["tiles"].cast<std::vector<std::vector<int>>>()) {
      p.matrix_tiles.push_back({tile.at(0), tile.at(1)});
    }
    p.matrix_split_k = units["split_k"].cast<int>();
    p.matrix_tile_overhead = units["tile_overhead"].cast<double>();
  }
  if (d.contains("tf32_flops")) p.tf32_flops = d["tf32_flops"].cast<double>();
  if (d.contains("attention")) {  // {backend: {pass: curve}}, backends by AttentionBackend's order
    const auto attention = d["attention"].cast<py::dict>();
    const char* backends[] = {"flash", "cudnn", "efficient"};
    for (size_t b = 0; b < p.attention_forward.size(); ++b) {
      if (!attention.contains(backends[b])) continue;
      const auto curves = attention[backends[b]].cast<py::dict>();
      for (auto [pass, curve] : {std::pair{"forward", &p.attention_forward[b]}, std::pair{"backward", &p.attention_backward[b]}}) {
        if (!curves.contains(pass)) continue;
        const auto given = curves[pass].cast<py::dict>();
        curve->sequence = given["sequence"].cast<std::vector<double>>();
        curve->flops = given["flops"].cast<std::vector<double>>();
        if (given.contains("causal_flops")) curve->causal_flops = given["causal_flops"].cast<std::vector<double>>();
        if (given.contains("tile")) {
          const auto tile = given["tile"].cast<std::array<int64_t, 2>>();
          curve->query_tile = tile[0], curve->key_tile = tile[1];
        }
        if (given.contains("head_dim")) curve->head_dim = given["head_dim"].cast<int64_t>();
        if (given.contains("head_dim_exponent")) curve->head_dim_exponent = given["head_dim_exponent"].cast<double>();
        if (given.contains("wave_time")) curve->wave_time = given["wave_time"].cast<double>();
        if (given.contains("grouped_rate")) curve->grouped_rate = given["grouped_rate"].cast<double>();
      }
    }
  }
  if (d.contains("memory_classes")) {  // {class name: {traffic, floor, row_step, rate}}, every class (Python fills them)
    const auto classes = d["memory_classes"].cast<py::dict>();
    for (size_t c = 0; c < p.memory_classes.size(); ++c) {
      const char* name = simclock::memory_class_name(static_cast<simclock::MemoryClass>(c));
      if (!classes.contains(name)) continue;
      const auto given = classes[name].cast<py::dict>();
      p.memory_classes[c] = simclock::ClassCost{given["traffic"].cast<double>(), given["floor"].cast<double>(),
                                                given.contains("row_step") ? given["row_step"].cast<double>() : 0.0,
                                                given.contains("rate") ? given["rate"].cast<double>() : 0.0};
    }
  }
  if (d.contains("multi_tensor_apply")) {
    const auto mta = d["multi_tensor_apply"].cast<py::dict>();
    p.multi_tensor.enabled = mta["enabled"].cast<bool>();
    p.multi_tensor.chunk = mta["chunk"].cast<int64_t>();
    p.multi_tensor.blocks = mta["blocks"].cast<int64_t>();
    p.multi_tensor.tensors = mta["tensors"].cast<std::vector<int64_t>>();
  }
  if (d.contains("softmax_rows")) {
    const auto rows = d["softmax_rows"].cast<py::dict>();
    p.softmax_rows.enabled = rows["enabled"].cast<bool>();
    p.softmax_rows.warp_elements = rows["warp_elements"].cast<int64_t>();
    p.softmax_rows.warp_bytes = rows["warp_bytes"].cast<int64_t>();
    p.softmax_rows.register_elements = rows["register_elements"].cast<int64_t>();
  }
  const auto eff = d["efficiency"].cast<py::dict>();
  p.matrix_efficiency = eff["matrix"].cast<double>();
  p.matrix_efficiency_8bit = eff["matrix_8bit"].cast<double>();
  p.vector_efficiency = eff["vector"].cast<double>();
  p.memory_efficiency = eff["memory"].cast<double>();
  p.host_link_efficiency = eff["host_link"].cast<double>();
  p.fabric_efficiency = eff["fabric"].cast<double>();
  if (eff.contains("convolution")) p.convolution_efficiency = eff["convolution"].cast<double>();
  if (eff.contains("convolution_backward")) {
    p.convolution_backward_efficiency = eff["convolution_backward"].cast<double>();
  }
  if (eff.contains("convolution_unaligned")) {
    p.convolution_unaligned_efficiency = eff["convolution_unaligned"].cast<double>();
  }
  return p;
}

CollectiveKind collective_named(const std::string& name) {
  using K = CollectiveKind;
  for (K k : {K::AllReduce, K::AllGather, K::ReduceScatter, K::Broadcast, K::Reduce, K::AllToAll, K::PointToPoint,
              K::Barrier}) {
    if (name == collective_name(k)) return k;
  }
  TORCH_CHECK(false, "simulated time: unknown collective '", name, "'");
}

DeviceProfile current_profile() {
  std::optional<DeviceProfile> p = simclock::profile();
  TORCH_CHECK(p, "simulated time is off: set a device profile first (torch.simhpu.set_profile)");
  return *p;
}

// What a FLOP formula needs of an argument: tensors (for their shapes) and plain values.
py::object to_python(const c10::IValue& v) {
  if (v.isTensor()) return py::cast(v.toTensor());
  if (v.isTensorList()) {
    py::list out;
    for (const at::Tensor& t : v.toTensorVector()) out.append(py::cast(t));
    return out;
  }
  if (v.isIntList()) return py::cast(v.toIntVector());
  if (v.isBoolList()) {  // (convolution_backward's output_mask)
    py::list out;
    for (bool b : v.toBoolList()) out.append(py::bool_(b));
    return out;
  }
  if (v.isInt()) return py::cast(v.toInt());
  if (v.isDouble()) return py::cast(v.toDouble());
  if (v.isBool()) return py::cast(v.toBool());
  return py::none();
}

// An entry's fields as Python values. Its names (operator, kernel, file, kinds) come from a
// few static strings: each becomes one Python string however many entries carry it, as a
// step of a large job logs hundreds of thousands of entries; its FLOPs, bytes and share of
// the peak repeat from layer to layer: each value becomes one Python float.
class EntryFields {
 public:
  py::tuple operator()(uint64_t id, const simclock::Entry& e) {
    const char* file = e.site.known() ? e.site.file() : nullptr;
    const char* cause = e.cause == simclock::Entry::Cause::Host    ? "host"
                        : e.cause == simclock::Entry::Cause::Event ? "event"
                        : e.cause == simclock::Entry::Cause::Peer  ? "peer"
                                                                   : "stream";
    return py::make_tuple(id, name(e.op), name(e.kernel), name(file), file ? e.site.line() : 0, e.device, e.stream,
                          name(work_name(e.work)), name(simclock::bound_name(e.bound)),
                          name(e.work == Work::Collective ? collective_name(e.collective) : nullptr), e.ranks,
                          e.dtype == c10::ScalarType::Undefined ? py::object(py::none()) : py::cast(e.dtype),
                          number(e.flops), number(e.bytes), number(e.peak_fraction), e.launched, e.start, e.end,
                          name(cause), e.after);
  }

 private:
  py::object name(const char* text) {  // (null: None)
    if (text == nullptr) return py::none();
    auto [it, fresh] = names_.try_emplace(text);
    if (fresh) it->second = py::str(text);
    return it->second;
  }
  py::object number(double value) {
    auto [it, fresh] = numbers_.try_emplace(value);
    if (fresh) it->second = py::float_(value);
    return it->second;
  }
  std::unordered_map<const char*, py::object> names_;
  std::unordered_map<double, py::object> numbers_;
};

} // namespace

void bind_simclock(py::module_& m) {
  m.def("_simclock_set_profile", [](const py::object& profile) {
    simclock::set_profile(profile.is_none() ? std::nullopt
                                            : std::optional<DeviceProfile>(profile_of(profile.cast<py::dict>())));
  });
  m.def("_simclock_profile_name", []() -> py::object {
    std::optional<DeviceProfile> p = simclock::profile();
    return p ? py::object(py::str(p->name)) : py::object(py::none());
  });
  m.def("_simclock_set_host_time", [](int mode) { simclock::set_host_time(static_cast<simclock::HostTime>(mode)); });
  m.def("_simclock_host_time", [] { return static_cast<int>(simclock::host_time_mode()); });
  m.def("_simclock_host_now", &simclock::host_now);
  m.def("_simclock_add_host_time", &simclock::add_host_time);
  m.def("_simclock_join", [](const std::string& host, int port, int64_t rank, std::vector<int64_t> ranks,
                             double timeout_seconds) {
    const py::gil_scoped_release no_gil;  // (connecting may wait for the store)
    simclock::joined::join(host, port, rank, std::move(ranks),
                           std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  });
  m.def("_simclock_stream_now", [](int64_t device, int64_t stream) {
    return simclock::stream_now(c10::Stream(c10::Stream::UNSAFE,
                                            c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)),
                                            stream));
  });
  m.def("_simclock_device_now", [](int64_t device) {
    return simclock::device_now(static_cast<c10::DeviceIndex>(device));
  });
  m.def("_simclock_start_log", &simclock::start_log);
  // The entries since `mark`, each as (id, op, kernel, file, line, ...), or as make(id, op, ...)
  // where a maker is given: a large log then never holds its tuples all at once.
  m.def("_simclock_stop_log", [](uint64_t mark, const py::object& make) {
    std::deque<simclock::Entry> entries;
    {
      py::gil_scoped_release no_gil;
      entries = simclock::stop_log(mark);
    }
    EntryFields fields;
    py::list out;
    for (uint64_t id = mark; !entries.empty(); ++id) {  // (each entry freed once it is a Python object)
      py::tuple row = fields(id, entries.front());
      entries.pop_front();
      out.append(make.is_none() ? py::object(row) : make(*row));
    }
    return out;
  }, py::arg("mark"), py::arg("make") = py::none());
  m.def("_simclock_collective_seconds", [](const std::string& kind, double bytes, int ranks, int rank_stride) {
    const DeviceProfile p = current_profile();
    return simclock::collective_seconds(collective_named(kind), bytes, ranks,
                                        simclock::nodes_spanned(ranks, 0, rank_stride, p), p);
  }, py::arg("kind"), py::arg("bytes"), py::arg("ranks"), py::arg("rank_stride") = 1);
  // (seconds, the part of them that does not grow with the bytes, nodes spanned)
  m.def("_simclock_collective_price", [](const std::string& kind, double bytes, int ranks, int rank_stride,
                                         const py::dict& profile) {
    const DeviceProfile p = profile_of(profile);
    const int nodes = simclock::nodes_spanned(ranks, 0, rank_stride, p);
    const CollectiveKind k = collective_named(kind);
    const simclock::CollectiveCost cost = simclock::collective_cost(k, bytes, ranks, nodes, p);
    return py::make_tuple(cost.seconds, cost.latency, nodes);
  });
  m.def("_simclock_set_op_classes", [](const std::unordered_map<std::string, std::string>& classes) {
    using simclock::MemoryClass;
    std::unordered_map<std::string, MemoryClass> named;
    for (const auto& [op, class_name] : classes) {
      size_t c = 0;
      while (c < static_cast<size_t>(MemoryClass::Count) &&
             class_name != simclock::memory_class_name(static_cast<MemoryClass>(c))) {
        ++c;
      }
      TORCH_CHECK(c < static_cast<size_t>(MemoryClass::Count), "simulated time: operator ", op,
                  ": unknown memory class '", class_name, "'");
      named[op] = static_cast<MemoryClass>(c);
    }
    simclock::set_op_classes(std::move(named));
  });
  m.def("_simclock_memory_classes", [] {
    std::vector<std::string> names;
    for (size_t c = 0; c < static_cast<size_t>(simclock::MemoryClass::Count); ++c) {
      names.emplace_back(simclock::memory_class_name(static_cast<simclock::MemoryClass>(c)));
    }
    return names;
  });
  m.def("_simclock_softmax_rows_in_registers", [](int64_t length, int64_t element_size, const py::dict& profile) {
    return simclock::softmax_rows_in_registers(length, element_size, profile_of(profile).softmax_rows);
  });
  m.def("_simclock_multi_tensor_kernels", [](const std::vector<int64_t>& numels, int depth, const py::dict& profile) {
    return simclock::multi_tensor_kernels(numels, depth, profile_of(profile).multi_tensor);
  });
  m.def("_simclock_set_flop_formula", [](const py::function& formula, std::vector<std::string> names) {
    // Kept for the process's life: launches may still ask while the interpreter shuts down.
    auto* kept = new py::function(formula);
    simclock::set_flop_formula(
        [kept](const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
               c10::ArrayRef<c10::IValue> outputs) -> std::optional<simclock::MatrixLaunch> {
          if (!Py_IsInitialized()) return std::nullopt;
          py::gil_scoped_acquire gil;
          // As a TorchDispatchMode sees the call (which the formulas are written for):
          // keyword-only arguments by keyword.
          py::list py_args, py_outputs;
          py::dict py_kwargs;
          const auto& schema = op.schema().arguments();
          for (size_t i = 0; i < args.size(); ++i) {
            if (i < schema.size() && schema[i].kwarg_only()) {
              py_kwargs[py::str(schema[i].name())] = to_python(args[i]);
            } else {
              py_args.append(to_python(args[i]));
            }
          }
          for (const auto& o : outputs) py_outputs.append(to_python(o));
          // FLOPs, or (FLOPs, {"gemm": (batch, m, n, k)} or {"attention": (pass, causal, sequence)}).
          py::object counted = (*kept)(op.operator_name().name, py_args, py_kwargs, py_outputs);
          if (counted.is_none()) return std::nullopt;
          simclock::MatrixLaunch matrix;
          if (py::isinstance<py::tuple>(counted)) {
            const auto pair = counted.cast<py::tuple>();
            matrix.flops = pair[0].cast<double>();
            const auto described = pair[1].cast<py::dict>();
            if (described.contains("gemm")) {
              const auto shape = described["gemm"].cast<std::array<int64_t, 4>>();
              matrix.batch = shape[0], matrix.m = shape[1], matrix.n = shape[2], matrix.k = shape[3];
            }
            // (pass, causal, sequence[, backend[, head dim, queries[, heads]]])
            if (described.contains("attention")) {
              const auto attention = described["attention"].cast<py::tuple>();
              matrix.attention_pass = attention[0].cast<uint8_t>();
              matrix.causal = attention[1].cast<bool>();
              matrix.sequence = attention[2].cast<int64_t>();
              if (attention.size() > 3) matrix.attention_backend = attention[3].cast<uint8_t>();
              if (attention.size() > 5) {
                matrix.head_dim = attention[4].cast<int64_t>();
                matrix.queries = attention[5].cast<int64_t>();
              }
              if (attention.size() > 6) matrix.heads = attention[6].cast<int64_t>();
            }
            if (described.contains("tf32")) matrix.tf32 = described["tf32"].cast<bool>();
            if (described.contains("convolution")) matrix.convolution = described["convolution"].cast<bool>();
            if (described.contains("convolution_backward")) {
              matrix.convolution_backward = described["convolution_backward"].cast<bool>();
            }
            if (described.contains("convolution_unaligned")) {
              matrix.convolution_unaligned = described["convolution_unaligned"].cast<bool>();
            }
            if (described.contains("layout_conversions")) {  // (elements, kernels)
              const auto conversions = described["layout_conversions"].cast<std::array<int64_t, 2>>();
              matrix.converted_elements = conversions[0], matrix.conversions = conversions[1];
            }
          } else {
            matrix.flops = counted.cast<double>();
          }
          return matrix;
        },
        std::move(names));
  });
}

} // namespace simhpu
