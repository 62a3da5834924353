#include "simclock/launch_cost.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <utility>

namespace simhpu::simclock {

namespace {

struct TensorTotals {
  double bytes = 0;
  double largest = 0;  // elements of the largest tensor
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool any = false;
};

void add_tensor(TensorTotals& totals, const DeviceTensor& t) {
  if (t.dtype == c10::ScalarType::Undefined || t.same_as >= 0) return;  // (a tensor passed twice is read once)
  const double n = static_cast<double>(t.numel());
  totals.any = true;
  if (t.dim() > 0) {  // (a 0-dim operand is priced as a kernel argument, as a Python number is)
    totals.bytes += distinct_elements(t.sizes, t.strides) * static_cast<double>(c10::elementSize(t.dtype));
  }
  totals.largest = std::max(totals.largest, n);
  const bool floating = c10::isFloatingType(t.dtype) || c10::isComplexType(t.dtype);
  if (totals.dtype == c10::ScalarType::Undefined ||
      (floating && !c10::isFloatingType(totals.dtype) && !c10::isComplexType(totals.dtype))) {
    totals.dtype = t.dtype;
  }
}

// A GEMM's compute and memory time as the part's GEMM library would run it:
// the fastest of the profile's tiles and split-K factors. Output tiles run in
// waves of one a unit, so a partial tile costs a whole one and a partial last
// wave a whole wave (NVIDIA's "Matrix Multiplication Background" guide: tile and
// wave quantisation); splitting K over several units fills a part a few tiles
// would leave idle, at the price of writing and reading back float32 partial sums.
// Each tile starts by filling its operand pipeline (the profile's tile_overhead),
// and a unit writes a tile's outputs at its share of the memory bandwidth while
// its next tile's K loop runs (Hopper's persistent, warp-specialised GEMMs store
// one tile's results as they load the next's operands): a wave takes the longer
// of the two, and only the last wave's writes follow its K loop.
struct Roofline {
  double compute, memory;
};
std::optional<Roofline> gemm_roofline(const LaunchWork& cost, const DeviceProfile& p, double peak_flops,
                                       double efficiency) {
  if (cost.work != Work::Matrix || p.matrix_units <= 0 || p.matrix_tiles.empty() || cost.gemm_m <= 0 ||
      cost.gemm_n <= 0 || cost.gemm_k <= 0 || cost.gemm_batch <= 0) {
    return std::nullopt;
  }
  const double unit_rate = peak_flops * efficiency / p.matrix_units;
  const double memory_rate = p.memory_bandwidth * p.memory_efficiency;
  // (outputs at least 16-bit: an FP8 GEMM writes bfloat16 or wider)
  const double output_size = std::max<double>(c10::elementSize(cost.dtype), 2);
  const double batch = static_cast<double>(cost.gemm_batch), k = static_cast<double>(cost.gemm_k);
  const double outputs = batch * static_cast<double>(cost.gemm_m) * static_cast<double>(cost.gemm_n);
  auto tiles_along = [](int64_t extent, int tile) { return static_cast<double>((extent + tile - 1) / tile); };
  std::optional<Roofline> best;
  for (const DeviceProfile::Tile& tile : p.matrix_tiles) {
    const double tiles = batch * tiles_along(cost.gemm_m, tile.m) * tiles_along(cost.gemm_n, tile.n);
    for (int split = 1; split <= std::max(p.matrix_split_k, 1); split *= 2) {
      const double waves = std::ceil(tiles * split / p.matrix_units);
      const double k_each = std::ceil(k / split);
      const double partial_sums = split > 1 ? 2.0 * split * outputs * sizeof(float) : 0.0;
      const double k_loop = 2.0 * tile.m * tile.n * k_each / unit_rate;
      const double writes = tile.m * tile.n * output_size / (memory_rate / p.matrix_units);
      const double compute = waves * (p.matrix_tile_overhead + std::max(k_loop, writes)) + writes;
      const Roofline candidate{compute, (cost.bytes + partial_sums) / memory_rate};
      if (!best || std::max(candidate.compute, candidate.memory) < std::max(best->compute, best->memory)) {
        best = candidate;
      }
    }
  }
  return best;
}

// What a length costs in whole tiles, against the length itself (1: a multiple of the tile, or no tile).
double whole_tiles(int64_t length, int64_t tile) {
  if (tile <= 0 || length <= 0) return 1.0;
  return static_cast<double>((length + tile - 1) / tile * tile) / static_cast<double>(length);
}

// A fused attention kernel's compute time by the profile's curve for its pass,
// if it has one: the kernel skips a causal mask's masked half, computes whole
// tiles and attains its curve's rate scaled by its head dim.

std::optional<double> attention_seconds(const LaunchWork& cost, const DeviceProfile& p, AttentionBackend which) {
  if (cost.work != Work::Matrix || cost.attention_pass == 0) return std::nullopt;
  size_t backend = std::min<size_t>(static_cast<size_t>(which), p.attention_forward.size() - 1);
  if (!(cost.attention_pass == 1 ? p.attention_forward[backend] : p.attention_backward[backend]).known()) {
    backend = static_cast<size_t>(AttentionBackend::Flash);  // (a backend without curves of its own: flash's)
  }
  const AttentionCurve& curve = cost.attention_pass == 1 ? p.attention_forward[backend] : p.attention_backward[backend];
  if (!curve.known() || cost.attention_sequence <= 0) return std::nullopt;
  const std::vector<double>& rates =
      cost.attention_causal && !curve.causal_flops.empty() ? curve.causal_flops : curve.flops;
  const double x = std::log2(static_cast<double>(cost.attention_sequence));
  double rate = rates.front();
  if (x >= std::log2(curve.sequence.back())) {
    rate = rates.back();
  } else {
    for (size_t i = 1; i < curve.sequence.size(); ++i) {
      const double x0 = std::log2(curve.sequence[i - 1]), x1 = std::log2(curve.sequence[i]);
      if (x < x1) {
        const double t = std::clamp((x - x0) / (x1 - x0), 0.0, 1.0);
        rate = rates[i - 1] + t * (rates[i] - rates[i - 1]);
        break;
      }
    }
  }
  if (cost.attention_group > 1) rate *= curve.grouped_rate;
  if (curve.head_dim > 0 && curve.head_dim_exponent > 0 && cost.attention_head_dim > 0) {
    rate *= std::pow(static_cast<double>(cost.attention_head_dim) / static_cast<double>(curve.head_dim),
                     curve.head_dim_exponent);
  }
  const int64_t queries = cost.attention_queries > 0 ? cost.attention_queries : cost.attention_sequence;
  const double tiles = whole_tiles(queries, curve.query_tile) * whole_tiles(cost.attention_sequence, curve.key_tile);
  double waves = 0;
  if (curve.wave_time > 0 && cost.attention_heads > 0 && p.matrix_units > 0) {
    // (a forward's block a query tile, a backward's a key tile: cuDNN's and FlashAttention's kernels)
    const int64_t tile = cost.attention_pass == 1 ? curve.query_tile : curve.key_tile;
    const int64_t along = cost.attention_pass == 1 ? queries : cost.attention_sequence;
    const int64_t blocks = cost.attention_heads * (tile > 0 ? (along + tile - 1) / tile : 1);
    waves = static_cast<double>((blocks + p.matrix_units - 1) / p.matrix_units);
  }
  return cost.flops * tiles * (cost.attention_causal ? 0.5 : 1.0) / rate + waves * curve.wave_time;
}

// The dimension a tensor's elements run along in memory: its dimension of the
// least stride among those of more than one element (-1: none, a scalar).
int64_t innermost_dim(const DeviceTensor& t) {
  int64_t found = -1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes[d] > 1 && (found < 0 || t.strides[d] < t.strides[found])) found = d;
  }
  return found;
}

// Whether a tensor is broadcast along a dimension (stride 0: the same elements again).
bool broadcast(const DeviceTensor& t) {
  return std::find(t.strides.begin(), t.strides.end(), 0) != t.strides.end();
}

// Whether a launch writes `t`'s storage, as its record says (none said: it may write all).
bool writes(const LaunchRecord& record, const DeviceTensor& t) {
  return t.storage_slot >= 0 && record.may_write(static_cast<size_t>(t.storage_slot));
}

// A launch's output: its first tensor it writes (none: nullptr).
const DeviceTensor* first_written(const LaunchRecord& record) {
  for (const KernelArg& arg : record.args) {
    const auto* t = std::get_if<DeviceTensor>(&arg);
    if (t != nullptr && t->dtype != c10::ScalarType::Undefined && writes(record, *t)) return t;
  }
  return nullptr;
}

// The elements of an elementwise kernel's (or a copy's) operands laid out in another order than
// its output (its first written tensor), broadcasts aside (see KernelTraits).
int64_t elements_read_across_strides(const LaunchRecord& record) {
  const DeviceTensor* out = first_written(record);
  if (out == nullptr || out->dim() < 2) return 0;
  const int64_t inner = innermost_dim(*out);
  if (inner < 0) return 0;
  int64_t elements = 0;
  for (const KernelArg& arg : record.args) {
    const auto* t = std::get_if<DeviceTensor>(&arg);
    if (t == nullptr || t == out || t->dtype == c10::ScalarType::Undefined || writes(record, *t)) continue;
    // (a broadcast operand, expanded or not, is read again and again: its own pattern)
    if (t->sizes != out->sizes || broadcast(*t)) continue;
    if (innermost_dim(*t) != inner) elements += t->numel();
  }
  return elements;
}

// Whether a tensor's elements fill its memory without gap or overlap, in whatever order:
// its dimensions of more than one element, by stride, each one's stride the product of the
// sizes inside it.
bool dense(const DeviceTensor& t) {
  c10::SmallVector<std::pair<int64_t, int64_t>, 6> by_stride;  // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes[d] > 1) by_stride.emplace_back(t.strides[d], t.sizes[d]);
  }
  std::sort(by_stride.begin(), by_stride.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : by_stride) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

// The offsets an elementwise kernel computes, one an operand an element (see KernelTraits),
// when an operand is broadcast over its output (fewer dimensions, or a dimension of one where
// the output has more), lies in other strides, or the output is not dense. 0 when every operand
// lies as the output does, or when an operand's shape does not broadcast to the output's (not a
// kernel over one iteration space). Every tensor is an operand, an in-place operator's twice
// (its input and its output), but a 0-dim one: the device stages a Python number as one, which
// the part's kernel takes as an argument (a 0-dim tensor the program made on the device, which
// the part would broadcast, is priced so too: the record does not tell the two apart).
int64_t offsets_computed(const LaunchRecord& record) {
  const DeviceTensor* out = first_written(record);
  if (out == nullptr || out->numel() <= 1) return 0;
  bool offsets = !dense(*out);
  int64_t operands = 1;
  for (const KernelArg& arg : record.args) {
    const auto* t = std::get_if<DeviceTensor>(&arg);
    if (t == nullptr || t == out || t->dtype == c10::ScalarType::Undefined || t->dim() == 0) continue;
    ++operands;
    if (t->dim() > out->dim()) return 0;
    const int64_t lead = out->dim() - t->dim();  // (shapes align at their last dimensions)
    for (int64_t d = 0; d < out->dim(); ++d) {
      const int64_t size = d < lead ? 1 : t->sizes[d - lead];
      if (size != out->sizes[d]) {
        if (size != 1) return 0;
        offsets = true;  // (broadcast along d)
      } else if (size > 1 && t->strides[d - lead] != out->strides[d]) {
        offsets = true;
      }
    }
  }
  return offsets ? out->numel() * operands : 0;
}

// A batch norm's input: its largest tensor of three dimensions or more (none: a
// [batch, channels] input, whose kernels the record does not tell apart).
const DeviceTensor* batch_norm_input(const LaunchRecord& record) {
  const DeviceTensor* input = nullptr;
  for (const KernelArg& arg : record.args) {
    const auto* t = std::get_if<DeviceTensor>(&arg);
    if (t == nullptr || t->dtype == c10::ScalarType::Undefined || t->dim() < 3) continue;
    if (input == nullptr || t->numel() > input->numel()) input = t;
  }
  return input != nullptr && input->sizes[1] > 0 ? input : nullptr;
}

bool channels_last(const DeviceTensor& t) { return innermost_dim(t) == 1; }

// The elements a channels-first batch norm's blocks walk one after another: PyTorch's
// CUDA kernels reduce a channel a block, so each wave of blocks (one a unit) walks a
// channel's elements. 0 units (not modelled): none.
int64_t batch_norm_chain(const DeviceTensor& input, int units) {
  if (units <= 0) return 0;
  const int64_t channels = input.sizes[1];
  const int64_t waves = (channels + units - 1) / units;
  return waves * (input.numel() / channels);
}

// A list of ints among a record's arguments, as the device passes one (empty: not one).
std::vector<int64_t> int_list_arg(const KernelArg& arg) {
  if (const auto* list = std::get_if<std::vector<int64_t>>(&arg)) return *list;
  if (const auto* value = std::get_if<c10::IValue>(&arg); value && value->isIntList()) return value->toIntVector();
  return {};
}

// The rows a layer or RMS norm's kernels pay for one by one, as PyTorch's CUDA kernels
// launch them (0: a norm without a normalized shape, a group norm). The forward runs a
// block a row, and a row's reduction costs its block a fixed time besides its bytes: an
// H100 and an H200 took the same 53 us for a float32 [25088, 384], whose bytes alone take
// 23 and 16 us. The backward's gamma/beta kernel gives a block 32 columns and walks all
// the rows in turn, two 1024-thread blocks a unit, waves of them when columns are many;
// with many rows and few columns it splits the rows over blocks too (no chain).
int64_t norm_rows(const LaunchRecord& record, bool backward, int units) {
  const DeviceTensor* input = nullptr;
  std::vector<int64_t> normalized;
  int64_t columns = 0;  // (the normalized shape's elements: a row's)
  const DeviceTensor* weight = nullptr;
  bool weight_gradient = true;
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg)) {
      if (input == nullptr && t->dtype != c10::ScalarType::Undefined) {
        input = t;
      } else if (columns > 0 && weight == nullptr && t->dtype != c10::ScalarType::Undefined &&
                 t->numel() == columns && t->dim() == static_cast<int64_t>(normalized.size())) {
        weight = t;
      }
    } else if (input != nullptr && normalized.empty()) {
      normalized = int_list_arg(arg);
      columns = normalized.empty() ? 0 : 1;
      for (const int64_t s : normalized) columns *= s;
    } else if (const auto* value = std::get_if<c10::IValue>(&arg); value && value->isBoolList()) {
      const auto mask = value->toBoolList();
      weight_gradient = mask.size() < 2 || mask.get(1);  // (output_mask: input, weight, bias)
    }
  }
  if (input == nullptr || columns <= 0 || input->numel() == 0) return 0;
  const int64_t rows = input->numel() / columns;
  if (!backward) return rows;
  if (units <= 0 || weight == nullptr || !weight_gradient) return 0;
  const int64_t blocks = (columns + 31) / 32;
  if (rows > 64 * 1024 && blocks < units / 2) return 0;
  const int64_t waves = (blocks + 2 * units - 1) / (2 * units);
  return rows * waves;
}

// A norm backward's passes over its full-size tensors: the input-gradient kernel reads the
// input and the output's gradient and writes the input's gradient, the gamma/beta kernel reads
// the first two again. Its share of the class's traffic is its two passes of the five.
constexpr double kGammaBetaShareOfTraffic = 2.0 / 5.0;

// A transposing copy's time follows the elements it moves, not their width: on an
// H100 bfloat16 [16384, 8192] and float32 [128, 196, 384] transposes both take 8 ps
// an element. Its bytes are counted as bfloat16's, which its class was fitted on.
constexpr double kTransposeBytesPerElement = 2.0;

// Whether a copy writes wider elements than it reads (a bfloat16 tensor converted
// to float32), as its record's written storages say (none said: not known, no).
bool widens(const LaunchRecord& record) {
  if (record.written_storages == 0) return false;
  size_t widest_read = 0, narrowest_written = 0;
  for (const KernelArg& arg : record.args) {
    const auto* t = std::get_if<DeviceTensor>(&arg);
    if (t == nullptr || t->dtype == c10::ScalarType::Undefined || t->storage_slot < 0) continue;
    const size_t size = c10::elementSize(t->dtype);
    if (record.may_write(static_cast<size_t>(t->storage_slot))) {
      narrowest_written = narrowest_written == 0 ? size : std::min(narrowest_written, size);
    } else {
      widest_read = std::max(widest_read, size);
    }
  }
  return widest_read > 0 && narrowest_written > widest_read;
}

// The dimensions a reduction's record says it reduces, as the input's dimensions:
// a stub's iterator gives its output stride 0 along them over the input's shape; a
// reference call gives its `dim` argument, the first list of ints after the input
// (or a lone int: max.dim, cumsum). Empty: every dimension, or not known.
struct ReducedDims {
  const DeviceTensor* input = nullptr;
  std::vector<bool> reduced;
};
ReducedDims reduced_dims(const LaunchRecord& record) {
  ReducedDims out;
  const DeviceTensor* strided_output = nullptr;
  std::optional<std::vector<int64_t>> dims;
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg)) {
      if (t->dtype == c10::ScalarType::Undefined) continue;
      const bool has_zero = broadcast(*t);
      if (has_zero && strided_output == nullptr) {
        strided_output = t;
      } else if (!has_zero && out.input == nullptr) {
        out.input = t;
      }
    } else if (out.input != nullptr && !dims) {
      if (const auto* list = std::get_if<std::vector<int64_t>>(&arg)) {
        dims = *list;
      } else if (const auto* value = std::get_if<c10::IValue>(&arg)) {
        if (value->isIntList()) dims = value->toIntVector();
        // (a lone int may be a norm's order, not a dimension)
        if (value->isInt() && std::string_view(record.op_name).find("norm") == std::string_view::npos) {
          dims = std::vector<int64_t>{value->toInt()};
        }
      } else if (const auto* one = std::get_if<int64_t>(&arg)) {
        dims = std::vector<int64_t>{*one};
      }
    }
  }
  if (out.input == nullptr) return out;
  const int64_t rank = out.input->dim();
  if (strided_output != nullptr && strided_output->dim() == rank && strided_output->sizes == out.input->sizes) {
    out.reduced.assign(static_cast<size_t>(rank), false);
    for (int64_t d = 0; d < rank; ++d) out.reduced[d] = strided_output->strides[d] == 0 && out.input->sizes[d] > 1;
  } else if (dims && !dims->empty()) {
    out.reduced.assign(static_cast<size_t>(rank), false);
    for (int64_t d : *dims) {
      if (d < 0) d += rank;
      if (d < 0 || d >= rank) return ReducedDims{};
      out.reduced[d] = out.input->sizes[d] > 1;
    }
  }
  return out;
}

// The rows a reduction walks in a chain when it keeps its input's contiguous
// dimension (a column reduction: x.sum(0) of a row-major matrix, a bias's
// gradient); 0 when it reduces along the contiguous dimension, as a row or a
// whole reduction does.
int64_t column_reduction_rows(const LaunchRecord& record) {
  const ReducedDims dims = reduced_dims(record);
  if (dims.input == nullptr || dims.reduced.empty()) return 0;
  const DeviceTensor& in = *dims.input;
  const int64_t innermost = innermost_dim(in);
  if (innermost < 0 || dims.reduced[innermost]) return 0;
  int64_t rows = 1;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (dims.reduced[d]) rows *= in.sizes[d];
  }
  return rows > 1 ? rows : 0;
}

// An int argument, as a kernel holds it or as a reference kernel is given it.
std::optional<int64_t> int_arg(const KernelArg& arg) {
  if (const auto* i = std::get_if<int64_t>(&arg)) return *i;
  if (const auto* value = std::get_if<c10::IValue>(&arg); value && value->isInt()) return value->toInt();
  return std::nullopt;
}

// What a gather reads of its source: only where its indices point, not the whole
// source. nll_loss reads one element a target (its backward none: it writes its
// gradient's zeros and one element a target), index_select and embedding a row an
// index, gather an element an index. source == nullptr: not a gather.
struct GatherRead {
  const DeviceTensor* source = nullptr;
  double elements = 0;
};
GatherRead gather_read(const LaunchRecord& record) {
  std::string_view op(record.op_name);
  if (op.substr(0, 6) == "aten::") op.remove_prefix(6);
  op = op.substr(0, op.find('.'));
  int source_at = 0, index_at = 1;  // among the launch's defined tensors, in order
  bool rows = false, nothing_read = false;
  if (op == "nll_loss_backward" || op == "nll_loss2d_backward") {
    source_at = 1, index_at = 2, nothing_read = true;
  } else if (op == "index_select" || op == "embedding") {
    rows = true;
  } else if (op != "nll_loss_forward" && op != "nll_loss2d_forward" && op != "gather") {
    return {};
  }
  std::vector<const DeviceTensor*> tensors;
  std::optional<int64_t> dim;
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg); t && t->dtype != c10::ScalarType::Undefined) {
      tensors.push_back(t);
    } else if (!dim) {
      dim = int_arg(arg);
    }
  }
  if (static_cast<int>(tensors.size()) <= std::max(source_at, index_at)) return {};
  const DeviceTensor& source = *tensors[source_at];
  const DeviceTensor& index = *tensors[index_at];
  if (source.same_as >= 0 || source.dim() == 0 || c10::isFloatingType(index.dtype)) return {};
  if (nothing_read) return {&source, 0};
  double elements = static_cast<double>(index.numel());
  if (rows) {  // (index_select's dim; embedding's rows are dimension 0)
    int64_t d = op == "index_select" && dim ? *dim : 0;
    if (d < 0) d += source.dim();
    if (d < 0 || d >= source.dim() || source.sizes[d] == 0) return {};
    elements *= static_cast<double>(source.numel() / source.sizes[d]);
  }
  return {&source, std::min(elements, static_cast<double>(source.numel()))};
}

// A softmax forward's rows, when it runs along its input's contiguous
// dimension (0: along another, as the part's spatial kernel runs it).
struct SoftmaxRowsOf {
  int64_t length = 0, element_size = 0;
};
SoftmaxRowsOf softmax_rows_of(const LaunchRecord& record) {
  const DeviceTensor* input = nullptr;
  std::optional<int64_t> dim;
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg); t && !input && t->dtype != c10::ScalarType::Undefined) {
      input = t;
    } else if (!dim) {
      dim = int_arg(arg);
    }
  }
  if (input == nullptr || !dim || input->dim() == 0) return {};
  int64_t d = *dim < 0 ? *dim + input->dim() : *dim;
  if (d < 0 || d >= input->dim()) return {};
  // (the library makes its input contiguous first: the dimensions after `d` decide)
  for (int64_t after = d + 1; after < input->dim(); ++after) {
    if (input->sizes[after] > 1) return {};
  }
  return {input->sizes[d], static_cast<int64_t>(c10::elementSize(input->dtype))};
}

double log2_ceil(int n) {
  return std::ceil(std::log2(static_cast<double>(std::max(n, 1))));
}

} // namespace

ContiguousCopies copies_made_contiguous(MemoryClass c, const LaunchRecord& record) {
  const bool row_wise = c == MemoryClass::Norm || c == MemoryClass::NormBackward || c == MemoryClass::Softmax ||
                        c == MemoryClass::SoftmaxInRegisters || c == MemoryClass::SoftmaxBackward;
  ContiguousCopies copies;
  if (!row_wise) return copies;
  for (const KernelArg& arg : record.args) {
    const auto* t = std::get_if<DeviceTensor>(&arg);
    if (t == nullptr || t->dtype == c10::ScalarType::Undefined || t->dim() < 2 || t->is_contiguous()) continue;
    if (writes(record, *t)) continue;
    if (broadcast(*t)) continue;
    copies.elements += t->numel();
    ++copies.count;
  }
  return copies;
}

int64_t multi_tensor_kernels(const std::vector<int64_t>& numels, int depth, const MultiTensorApply& mta) {
  if (numels.empty() || mta.tensors.empty()) return 1;
  const size_t at = static_cast<size_t>(std::clamp(depth, 1, static_cast<int>(mta.tensors.size())) - 1);
  const int64_t most_tensors = std::max<int64_t>(mta.tensors[at], 1), most_blocks = std::max<int64_t>(mta.blocks, 1);
  const int64_t chunk = std::max<int64_t>(mta.chunk, 1);
  int64_t kernels = 0, tensors = 0, blocks = 0;
  for (const int64_t n : numels) {
    if (n == 0) continue;
    ++tensors;
    // (a tensor's chunks may straddle launches: the launch fills, the rest carries over)
    for (int64_t chunks = (n + chunk - 1) / chunk; chunks > 0; --chunks) {
      ++blocks;
      const bool last_chunk = chunks == 1;
      if (blocks == most_blocks || (last_chunk && tensors == most_tensors)) {
        ++kernels;
        blocks = 0;
        tensors = last_chunk ? 0 : 1;
      }
    }
  }
  return std::max<int64_t>(kernels + (blocks > 0 ? 1 : 0), 1);
}

bool softmax_rows_in_registers(int64_t length, int64_t element_size, const SoftmaxRows& rule) {
  if (!rule.enabled || length <= 0) return false;
  const bool a_warp_a_row = length <= rule.warp_elements && length * element_size <= rule.warp_bytes;
  return !a_warp_a_row && length <= rule.register_elements;
}

void complete_from_record(LaunchWork& cost, KernelTraits& traits, const LaunchRecord& record,
                          const DeviceProfile& profile) {
  TensorTotals totals;
  std::vector<int64_t> first_list;  // a multi-tensor kernel's tensors, by its first list
  int lists = 0;
  const GatherRead gather = gather_read(record);
  for (const KernelArg& arg : record.args) {
    if (const auto* t = std::get_if<DeviceTensor>(&arg)) {
      if (t == gather.source) {  // (what it reads of it)
        totals.bytes += gather.elements * static_cast<double>(c10::elementSize(t->dtype));
        totals.largest = std::max(totals.largest, gather.elements);
        continue;
      }
      add_tensor(totals, *t);
    } else if (const auto* list = std::get_if<std::vector<DeviceTensor>>(&arg)) {
      for (const DeviceTensor& t : *list) add_tensor(totals, t);
      if (!list->empty() && list->front().dim() > 0) {
        if (lists++ == 0) {
          for (const DeviceTensor& t : *list) first_list.push_back(t.numel());
        }
      }
    }
  }
  if (traits.memory_class == MemoryClass::Copy && elements_read_across_strides(record) > 0) {
    traits.memory_class = MemoryClass::Transpose;
  } else if (traits.memory_class == MemoryClass::Copy && widens(record)) {
    traits.memory_class = MemoryClass::WideningCopy;
  }
  if (traits.memory_class == MemoryClass::Reduction) {
    if (const int64_t rows = column_reduction_rows(record); rows > 0) {
      traits.memory_class = MemoryClass::ColumnReduction;
      traits.reduced_rows = rows;
    }
  }
  if (traits.memory_class == MemoryClass::BatchNorm || traits.memory_class == MemoryClass::BatchNormBackward) {
    if (const DeviceTensor* input = batch_norm_input(record)) {
      if (channels_last(*input)) {
        traits.memory_class = traits.memory_class == MemoryClass::BatchNorm ? MemoryClass::BatchNormChannelsLast
                                                                              : MemoryClass::BatchNormChannelsLastBackward;
      } else {
        traits.reduced_rows = batch_norm_chain(*input, profile.matrix_units);
      }
    }
  }
  const bool norm = traits.memory_class == MemoryClass::Norm || traits.memory_class == MemoryClass::NormBackward;
  // (only a part whose profile prices a norm's rows needs them counted)
  if (norm && profile.memory_classes[static_cast<size_t>(traits.memory_class)].row_step > 0) {
    traits.reduced_rows = norm_rows(record, traits.memory_class == MemoryClass::NormBackward, profile.matrix_units);
  }
  traits.contiguous_copy_elements = copies_made_contiguous(traits.memory_class, record).elements;
  const bool elementwise = traits.memory_class == MemoryClass::Elementwise ||
                           traits.memory_class == MemoryClass::Transcendental ||
                           traits.memory_class == MemoryClass::Special;
  if (elementwise) {
    traits.elements_read_across_strides = elements_read_across_strides(record);
    // (only a part whose profile prices offsets needs them counted)
    if (profile.strided_elementwise > 0) traits.offsets_computed = offsets_computed(record);
  }
  if (traits.memory_class == MemoryClass::Softmax) {
    const SoftmaxRowsOf rows = softmax_rows_of(record);
    if (softmax_rows_in_registers(rows.length, rows.element_size, profile.softmax_rows)) {
      traits.memory_class = MemoryClass::SoftmaxInRegisters;
    }
  }
  const bool chunked = traits.memory_class == MemoryClass::MultiTensor ||
                       traits.memory_class == MemoryClass::FusedOptimizer;
  if (chunked && traits.kernels == 1 && lists > 0 && profile.multi_tensor.enabled) {
    traits.kernels = multi_tensor_kernels(first_list, lists, profile.multi_tensor);
  }
  if (!totals.any) {
    // Payload kernels (collectives, compiled code handed storages): what they hold.
    std::unordered_set<const void*> seen;
    for (const c10::Storage& s : record.keep_alive) {
      if (seen.insert(s.unsafeGetStorageImpl()).second) {
        totals.bytes += static_cast<double>(s.nbytes());
      }
    }
  }
  if (cost.bytes < 0) cost.bytes = totals.bytes;
  if (cost.flops < 0) cost.flops = cost.work == Work::Vector ? totals.largest : 0;
  if (cost.dtype == c10::ScalarType::Undefined) cost.dtype = totals.dtype;
}

Timing time_of(const LaunchWork& cost, const DeviceProfile& p, const KernelTraits& traits) {
  if (cost.seconds >= 0) {
    return {cost.seconds, Bound::Latency, 0};
  }
  switch (cost.work) {
    case Work::Marker:
    case Work::KernelArgument:
      return {};
    case Work::HostToDevice:
    case Work::DeviceToHost: {
      const double peak = cost.pageable ? p.pageable_bandwidth : p.host_link.bandwidth;
      const double seconds = p.host_link.latency + cost.bytes / (peak * p.host_link_efficiency);
      return {seconds, Bound::HostLink, cost.bytes / seconds / peak};
    }
    case Work::Collective:
      return {collective_seconds(cost.collective, cost.bytes, cost.ranks,
                                 nodes_spanned(cost.ranks, cost.first_rank, cost.rank_stride, p), p),
              Bound::Fabric, 0};
    case Work::Vector:
    case Work::Matrix:
      break;
  }
  const c10::ScalarType dtype = cost.dtype == c10::ScalarType::Undefined ? c10::ScalarType::Float : cost.dtype;
  const bool matrix = cost.work == Work::Matrix;
  const bool tf32 = matrix && traits.tf32 && dtype == c10::ScalarType::Float && p.tf32_flops > 0;
  const double peak_flops = tf32 ? p.tf32_flops : (matrix ? p.matrix_flops : p.vector_flops)[static_cast<size_t>(dtype)];
  double memory = cost.bytes / (p.memory_bandwidth * p.memory_efficiency);
  const double efficiency = !matrix ? p.vector_efficiency
                            : traits.convolution_unaligned && p.convolution_unaligned_efficiency > 0
                                ? p.convolution_unaligned_efficiency
                            : traits.convolution_backward && p.convolution_backward_efficiency > 0
                                ? p.convolution_backward_efficiency
                            : traits.convolution && p.convolution_efficiency > 0 ? p.convolution_efficiency
                            : c10::elementSize(dtype) == 1 && p.matrix_efficiency_8bit > 0 ? p.matrix_efficiency_8bit
                                                                                            : p.matrix_efficiency;
  // (a convolution whose channels the library's tensor-core kernels cannot take runs its generic
  // implicit GEMM, whose time follows its FLOPs, not a tensor-core kernel's tiles and waves: an
  // H100 took as long for a stem's [64, 3, 224, 224] by 7x7 as for a patch embedding's by 16x16,
  // 15 GFLOP each, where tiles of 64 output channels would price the stem twice the patches)
  const bool unaligned = traits.convolution_unaligned && p.convolution_unaligned_efficiency > 0;
  double compute = 0;
  if (const auto attention = attention_seconds(cost, p, traits.attention_backend)) {
    compute = *attention;
  } else if (const auto gemm = unaligned ? std::nullopt : gemm_roofline(cost, p, peak_flops, efficiency)) {
    compute = gemm->compute;
    memory = gemm->memory;
  } else {
    compute = cost.flops / (peak_flops * efficiency);
  }
  double seconds = p.kernel_overhead + std::max(compute, memory);
  if (matrix && traits.convolution) {
    if (traits.converted_elements > 0 && p.convolution_layout_conversion > 0) {
      // (the library's layout conversions: kernels of their own, before and after its arithmetic)
      seconds += static_cast<double>(traits.conversions) * p.kernel_overhead +
                 static_cast<double>(traits.converted_elements) * p.convolution_layout_conversion;
    }
    seconds = std::max(seconds, p.convolution_floor);
  }
  if (!matrix) {
    // A vector kernel by its class: the traffic its bytes cause, and the least such
    // a kernel takes (each of a multi-tensor apply's kernels pays it; a tensor of
    // one, kernels == 0, pays none: its operator's end adds them).
    const ClassCost& c = p.memory_classes[static_cast<size_t>(traits.memory_class)];
    const ClassCost& transpose = p.memory_classes[static_cast<size_t>(MemoryClass::Transpose)];
    // (moving `elements` across strides, once in each direction or one way)
    auto moved_across_strides = [&](double elements, double directions) {
      const double bytes = directions * elements * kTransposeBytesPerElement;
      const double moved = transpose.traffic * bytes / (p.memory_bandwidth * p.memory_efficiency);
      return transpose.rate > 0 ? std::max(moved, bytes / transpose.rate) : moved;
    };
    // (a copy of `elements`, read across strides and written contiguous)
    auto transposing_copy = [&](double elements) {
      return std::max(std::max(transpose.floor, p.kernel_overhead), p.kernel_overhead + moved_across_strides(elements, 2));
    };
    if (traits.memory_class == MemoryClass::Transpose && cost.flops > 0) {
      memory = moved_across_strides(cost.flops, 2);  // (a vector kernel's FLOPs: its elements)
    } else {
      memory *= c.traffic;
      if (c.rate > 0) memory = std::max(memory, cost.bytes / c.rate);
    }
    if (traits.offsets_computed > 0) {
      // (PyTorch's generic elementwise kernel: its index arithmetic, not its bytes, bounds it)
      memory = std::max(memory, static_cast<double>(traits.offsets_computed) * p.strided_elementwise);
    }
    const double least = std::max(c.floor, p.kernel_overhead);
    seconds = traits.kernels == 0 ? std::max(compute, memory)
                                  : std::max(least, p.kernel_overhead + std::max(compute, memory)) +
                                        static_cast<double>(traits.kernels - 1) * least;
    const double chain = static_cast<double>(traits.reduced_rows) * c.row_step;
    if (traits.memory_class == MemoryClass::NormBackward) {
      // (the chain is the gamma/beta kernel's, which makes part of the class's traffic too: that
      // kernel takes the longer of its reads and its chain, so the chain adds what they do not cover)
      seconds += std::max(0.0, chain - kGammaBetaShareOfTraffic * memory);
    } else {
      seconds += chain;
    }
    if (traits.elements_read_across_strides > 0) {
      // (each such read costs what half a transposing copy's moves do, on top of its bytes' pass)
      const double across = moved_across_strides(static_cast<double>(traits.elements_read_across_strides), 1);
      seconds += across;
      memory += across;
    }
    if (traits.contiguous_copy_elements > 0) {
      const double copy = transposing_copy(static_cast<double>(traits.contiguous_copy_elements));
      seconds += copy;
      memory += copy;
    }
    if (seconds <= 0) return {0, Bound::Latency, 0};
  }
  const double flops_fraction = cost.flops / seconds / peak_flops;
  const double bytes_fraction = cost.bytes / seconds / p.memory_bandwidth;
  if (std::max(compute, memory) <= seconds / 2) {  // (its fixed time dominates)
    return {seconds, Bound::Latency, std::max(flops_fraction, bytes_fraction)};
  }
  return compute >= memory ? Timing{seconds, Bound::Compute, flops_fraction}
                           : Timing{seconds, Bound::Memory, bytes_fraction};
}

int nodes_spanned(int ranks, int first_rank, int rank_stride, const DeviceProfile& p) {
  const int per_node = std::max(p.devices_per_node, 1);
  if (ranks <= 1) return 1;
  if (rank_stride <= 0) return (ranks + per_node - 1) / per_node;  // (packed, the least it can span)
  if (rank_stride >= per_node) return ranks;
  const int64_t last = static_cast<int64_t>(first_rank) + static_cast<int64_t>(ranks - 1) * rank_stride;
  return static_cast<int>(last / per_node - first_rank / per_node + 1);
}

CollectiveCost collective_cost(CollectiveKind kind, double bytes, int ranks, int nodes, const DeviceProfile& p) {
  const int n = std::max(ranks, 1);
  if (n == 1) return {p.kernel_overhead, p.kernel_overhead};  // a local copy at most
  nodes = std::max(nodes, 1);
  const double steps = static_cast<double>(n - 1);
  const double share = steps / n;  // of the buffer each rank sends per ring pass
  // A group with several ranks in each of several nodes can go hierarchically:
  // inside each node over its links (or its switch, when it reduces), between
  // nodes over every rank's own link at once, each carrying a node's share. NCCL
  // pipelines the two (its rings and trees cross NVLink and the NICs chunk by
  // chunk), so the slower of them sets the time; the flat ring would send
  // everything at one link's speed.
  const int per_node = (n + nodes - 1) / nodes;
  const bool layered = nodes > 1 && per_node > 1;
  const double g = per_node, m = nodes;
  // Moving `volume` bytes through a path of bandwidth `bw`, pipelined in chunks: the
  // pipeline fills before it streams. Its chunks grow with the message up to a
  // limit, so a message shorter than the full pipeline costs twice its bytes, a
  // longer one its bytes and the pipeline's (the profile's pipeline_fill; 0: none).
  auto streamed = [&p](double volume, double bw) { return (volume + std::min(volume, p.pipeline_fill)) / bw; };
  std::optional<CollectiveCost> best;  // the tuner's choice: the fastest algorithm and protocol
  auto consider = [&best](double latency, double transfer) {
    if (!best || latency + transfer < best->seconds) best = CollectiveCost{latency + transfer, latency};
  };
  // Each protocol trades latency for bandwidth (NCCL's LL, LL128 and Simple); a
  // profile without protocols has one that adds nothing to its links.
  static const std::vector<CollectiveProtocol> plain{CollectiveProtocol{}};
  const CollectiveProtocol* bulk = nullptr;  // the protocol with the most bandwidth (the switch's, below)
  for (const CollectiveProtocol& protocol : p.protocols.empty() ? plain : p.protocols) {
    if (!bulk || protocol.bandwidth >= bulk->bandwidth) bulk = &protocol;
    const double hop_in = p.intra_node.latency + protocol.intra_hop;
    const double hop_out = p.inter_node.latency + protocol.inter_hop;
    const double rate = p.fabric_efficiency * protocol.bandwidth;
    const double bw_in = p.intra_node.bandwidth * rate, bw_out = p.inter_node.bandwidth * rate;
    const double bw = nodes > 1 ? bw_out : bw_in;  // a flat algorithm's slowest link
    // A flat ring of `hops` steps: the steps that cross between nodes at the network's latency.
    auto ring_latency = [&](double hops, double crossing) {
      return protocol.base_latency + (hops - crossing) * hop_in + crossing * hop_out;
    };
    auto hierarchical = [&](double passes) {  // 2 for an all_reduce, 1 for a gather or a scatter
      consider(protocol.base_latency + passes * ((g - 1) * hop_in + (m - 1) * hop_out),
               std::max(streamed(passes * (g - 1) / g * bytes, bw_in), streamed(passes * (m - 1) / m * (bytes / g), bw_out)));
    };
    // a ring's steps that cross between nodes, both passes (every one, with a rank a node)
    const double crossings = nodes > 1 ? std::min(2.0 * nodes, 2 * steps) : 0.0;
    switch (kind) {
      case CollectiveKind::AllReduce:
        consider(ring_latency(2 * steps, crossings), streamed(2 * share * bytes, bw));
        // a tree: up and down its depth, a chain inside each node and a binary tree
        // between nodes (as NCCL builds it)
        consider(protocol.base_latency + 2 * ((g - 1) * hop_in + log2_ceil(nodes) * hop_out),
                 streamed(2 * bytes, bw));
        if (layered) hierarchical(2);
        break;
      case CollectiveKind::AllGather:      // bytes: the gathered whole
      case CollectiveKind::ReduceScatter:  // bytes: the input whole
        consider(ring_latency(steps, crossings / 2), streamed(share * bytes, bw));  // (one pass)
        if (layered) hierarchical(1);
        break;
      case CollectiveKind::AllToAll:
        consider(ring_latency(steps, nodes > 1 ? steps * (m - 1) / m : 0), streamed(share * bytes, bw));
        break;
      case CollectiveKind::Broadcast:
      case CollectiveKind::Reduce:
        consider(ring_latency(steps, nodes > 1 ? m : 0), streamed(bytes, bw));  // pipelined along a ring
        consider(protocol.base_latency + log2_ceil(n) * (nodes > 1 ? hop_out : hop_in),
                 streamed(log2_ceil(n) * bytes, bw));  // tree
        break;
      case CollectiveKind::PointToPoint:
        consider(protocol.base_latency + (nodes > 1 ? hop_out : hop_in), streamed(bytes, bw));
        break;
      case CollectiveKind::Barrier:
        consider(protocol.base_latency + 2 * log2_ceil(n) * (nodes > 1 ? hop_out : hop_in), 0);
        break;
    }
  }
  if (kind == CollectiveKind::AllReduce && p.switch_reduction_bandwidth > 0 && (nodes == 1 || layered)) {
    // The node's switch reduces (NVLink SHARP): each device sends its buffer once
    // and receives the sum once, at the bandwidth and latency measured; between
    // nodes, a tree over the network carries each node's sum, pipelined with it.
    const double inside = streamed(bytes, p.switch_reduction_bandwidth);
    if (nodes == 1) {
      consider(p.switch_reduction_latency, inside);
    } else {
      const double hop_out = p.inter_node.latency + bulk->inter_hop;
      const double bw_out = p.inter_node.bandwidth * p.fabric_efficiency * bulk->bandwidth;
      consider(p.switch_reduction_latency + 2 * log2_ceil(nodes) * hop_out,
               std::max(inside, streamed(2 * (m - 1) / m * (bytes / g), bw_out)));
    }
  }
  return *best;
}

double collective_seconds(CollectiveKind kind, double bytes, int ranks, int nodes, const DeviceProfile& p) {
  return collective_cost(kind, bytes, ranks, nodes, p).seconds;
}

const char* memory_class_name(MemoryClass c) {
  switch (c) {
    case MemoryClass::Elementwise: return "elementwise";
    case MemoryClass::Transcendental: return "transcendental";
    case MemoryClass::Special: return "special";
    case MemoryClass::Reduction: return "reduction";
    case MemoryClass::ColumnReduction: return "column_reduction";
    case MemoryClass::Softmax: return "softmax";
    case MemoryClass::SoftmaxInRegisters: return "softmax_in_registers";
    case MemoryClass::SoftmaxBackward: return "softmax_backward";
    case MemoryClass::Norm: return "norm";
    case MemoryClass::NormBackward: return "norm_backward";
    case MemoryClass::Index: return "index";
    case MemoryClass::Copy: return "copy";
    case MemoryClass::Transpose: return "transpose";
    case MemoryClass::WideningCopy: return "widening_copy";
    case MemoryClass::Random: return "random";
    case MemoryClass::Loss: return "loss";
    case MemoryClass::MultiTensor: return "multi_tensor";
    case MemoryClass::BatchNorm: return "batch_norm";
    case MemoryClass::BatchNormBackward: return "batch_norm_backward";
    case MemoryClass::Pooling: return "pooling";
    case MemoryClass::PoolingBackward: return "pooling_backward";
    case MemoryClass::FusedOptimizer: return "fused_optimizer";
    case MemoryClass::BatchNormChannelsLast: return "batch_norm_channels_last";
    case MemoryClass::BatchNormChannelsLastBackward: return "batch_norm_channels_last_backward";
    case MemoryClass::Concatenation: return "concatenation";
    case MemoryClass::Count: break;
  }
  return "?";
}

const char* bound_name(Bound bound) {
  switch (bound) {
    case Bound::Compute: return "compute";
    case Bound::Memory: return "memory";
    case Bound::Latency: return "latency";
    case Bound::HostLink: return "host-link";
    case Bound::Fabric: return "fabric";
    case Bound::None: return "none";
  }
  return "?";
}

} // namespace simhpu::simclock
