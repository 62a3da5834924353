#pragma once
// What the simulated clock knows of the part it models: rates, latencies and
// links, as read from a profile (torch_simhpu/profiles/*.json, or the user's;
// validated in Python, torch_simhpu/simulation.py). Seconds, bytes, FLOPs.
#include "simclock/kernel_traits.h"

#include <c10/core/ScalarType.h>

#include <array>
#include <string>
#include <vector>

namespace simhpu::simclock {

struct Link {
  double bandwidth = 0;  // bytes/s, one direction, per device
  double latency = 0;    // s per message
};

// An attention kernel's attained FLOP/s by sequence length (measured at one head
// dim), a causal launch counting half its FLOPs; between the points by the sequence
// length's log, beyond them the nearest. The kernel computes whole tiles of queries
// by keys (0: not stated), so a sequence that is not a multiple of a tile costs what
// the tiles it needs cost; a head dim other than the curve's attains
// (head_dim / curve's)^head_dim_exponent of its rate.
struct AttentionCurve {
  std::vector<double> sequence, flops, causal_flops;  // causal_flops empty: as flops
  int64_t query_tile = 0, key_tile = 0;
  int64_t head_dim = 0;  // (0: rates for any head dim)
  double head_dim_exponent = 0;
  // What each wave of the kernel's blocks (one a unit) takes besides its FLOPs: a block's
  // prologue and epilogue (loading its tile, writing its output), which short sequences,
  // a few tiles a block, pay in full (seconds; 0: none). The forward's blocks are query
  // tiles, the backward's key tiles.
  double wave_time = 0;
  // The rate a call whose key heads each serve several query heads (grouped-query
  // attention) attains, as a multiple of the curve's: the library's grouped kernels
  // share each key and value tile across the group (1: as any other).
  double grouped_rate = 1;
  bool known() const { return !sequence.empty(); }
};

// How a collective library moves data (NCCL's LL, LL128 and Simple protocols):
// the latency a call starts with, the latency each step of an algorithm adds on
// top of its link's (inside a node, across the network), and the fraction of the
// link's bandwidth it reaches. The library's tuner takes the fastest.
struct CollectiveProtocol {
  double base_latency = 0, intra_hop = 0, inter_hop = 0, bandwidth = 1;
};

// What a class of vector kernels (MemoryClass, simclock/kernel_traits.h) costs: the
// memory traffic its operands' bytes cause (1: each byte once; a softmax's
// extra passes over long rows more), the least time such a kernel takes, what
// each row it walks in a chain adds (a column reduction's threads add their rows
// one after another: the part's parallelism is its outputs, not its bytes), and
// the rate its units get through its bytes (0: no limit but the memory's): a
// softmax or a bfloat16 conversion takes as long on an H200 as on an H100, whose
// dies are one, though the H200's memory is 1.4x faster.
struct ClassCost {
  double traffic = 1, floor = 0, row_step = 0, rate = 0;
};

// How the part's library batches a list of tensors into kernels (CUDA's
// multi-tensor apply): chunks of `chunk` elements, at most `blocks` chunks and
// `tensors[depth - 1]` tensors a launch, for `depth` lists.
struct MultiTensorApply {
  bool enabled = true;  // false: the part's _foreach_ ops loop over their tensors (a CPU)
  int64_t chunk = 65536;
  int64_t blocks = 320;
  std::vector<int64_t> tensors{110, 64, 48, 36, 30};
};

// Which kernel the part's library runs a softmax's rows with, by their length
// (PyTorch's CUDA softmax forward along a contiguous dimension): a warp a row up
// to `warp_elements` elements and `warp_bytes` bytes; past that, a block a row
// with the row held in its threads' registers up to `register_elements` (its
// threads' loads scalar, not vector: a rate of its own); longer rows from memory.
struct SoftmaxRows {
  bool enabled = true;  // false: one kernel whatever the rows' length (a CPU's)
  int64_t warp_elements = 2048;
  int64_t warp_bytes = 8192;
  int64_t register_elements = 9216;  // (1,024 threads, at most 9 elements each)
};

struct DeviceProfile {
  std::string name;
  // FLOP/s of matrix units (GEMM, convolution, attention) and of vector units
  // (everything else), by dtype.
  std::array<double, static_cast<size_t>(c10::ScalarType::NumOptions)> matrix_flops{};
  std::array<double, static_cast<size_t>(c10::ScalarType::NumOptions)> vector_flops{};
  double tf32_flops = 0;  // a float32 matmul in TF32, when the program allows it (0: the float32 rate)
  double memory_bandwidth = 0;
  double kernel_overhead = 0;       // the least a kernel takes on the device (back to back)
  double launch_latency = 0;        // from the host's launch to the earliest start
  double host_op_overhead = 0;      // host time the framework takes to dispatch an operator to the part
  double host_launch_overhead = 0;  // host time the part's driver takes to launch a kernel
  double sync_latency = 0;          // for the host to see that the device finished
  double host_autograd_overhead = 0;  // host time the autograd engine takes a node, besides its operators
  // Host time a line of the program's own Python takes (nn.Module's machinery, a model's forward, an
  // optimizer's bookkeeping), besides the operators it calls (0: not counted).
  double host_python_line = 0;
  // Host time a convolution call takes in the part's library besides its launches (cuDNN finds
  // its plan and workspace, and launches layout changes), forward and backward.
  double host_convolution_overhead = 0;
  double host_convolution_backward_overhead = 0;
  // The host runs each kernel itself before it goes on (a CPU is its own host):
  // a launch returns when its kernel ends.
  bool synchronous_launches = false;
  Link host_link;
  double pageable_bandwidth = 0;    // host link from pageable (unpinned) memory
  int devices_per_node = 1;
  Link intra_node;
  Link inter_node;
  // An all_reduce the node's switch reduces (NVLink SHARP): the bytes each device
  // reaches it at, and the time a call takes besides, as measured (0: the switch
  // does not reduce).
  double switch_reduction_bandwidth = 0, switch_reduction_latency = 0;
  std::vector<CollectiveProtocol> protocols;  // empty: one that adds nothing to the links
  // The bytes a collective's chunk pipeline holds: its transfer fills them before it
  // streams, all of a shorter message (0: streamed from the first byte).
  double pipeline_fill = 0;
  // The matrix units a GEMM's output tiles are spread over, and the tiles the
  // part's GEMM library chooses among (0 units: not modelled, every GEMM at the
  // one efficiency). A GEMM runs in waves of one tile a unit: its time is its
  // waves', the last one's idle units and its tiles' padding included (tile and
  // wave quantisation). Up to `matrix_split_k` units may share one tile's K,
  // their partial sums written and read back once (split-K, for GEMMs with too
  // few tiles to fill the part). The library is taken to pick the fastest.
  int matrix_units = 0;
  struct Tile {
    int m, n;
  };
  std::vector<Tile> matrix_tiles;
  int matrix_split_k = 1;
  double matrix_tile_overhead = 0;  // s a tile spends besides its K loop and its outputs
  // Fused attention (flash-style kernels), forward and backward: priced by their
  // own curves instead of the matrix efficiency, when the profile gives them.
  // By backend (AttentionBackend): each library's kernels have their own curves.
  std::array<AttentionCurve, static_cast<size_t>(AttentionBackend::Count)> attention_forward, attention_backward;
  std::array<ClassCost, static_cast<size_t>(MemoryClass::Count)> memory_classes{};
  MultiTensorApply multi_tensor;
  SoftmaxRows softmax_rows;
  // The fraction of each peak that real kernels reach.
  double matrix_efficiency = 1, vector_efficiency = 1, memory_efficiency = 1, host_link_efficiency = 1,
         fabric_efficiency = 1;
  // 8-bit (FP8, INT8) GEMMs' own, when the part's differs (0: the matrix efficiency).
  double matrix_efficiency_8bit = 0;
  // Convolutions' own (cuDNN's kernels and their layout changes), when given (0: the matrix efficiency).
  double convolution_efficiency = 0;
  // A convolution's backward's (cuDNN's data- and weight-gradient kernels reach far less of the
  // peak than its forward), when given (0: the convolution efficiency).
  double convolution_backward_efficiency = 0;
  // A convolution whose input channels (a group's) are not a multiple of 8: the library's
  // tensor-core kernels need aligned channels, and it falls back to slower ones (0: not separate).
  double convolution_unaligned_efficiency = 0;
  // The least a convolution launch takes (its library's per-call setup: a CPU's oneDNN reorders
  // its operands' layouts), where measured (0: none beyond kernel_overhead).
  double convolution_floor = 0;
  // Seconds an element of a channels-first 16-bit convolution's operands and results takes to
  // convert to and from the channels-last layout the part's library's kernels run (0: its kernels
  // run the layout they are given).
  double convolution_layout_conversion = 0;
  // Seconds PyTorch's generic elementwise kernel takes an operand's offset (an element of each
  // operand), where its operands do not all lie as its output does: that index arithmetic, not
  // its bytes, bounds it (0: its bytes alone; see KernelTraits::offsets_computed).
  double strided_elementwise = 0;
};

} // namespace simhpu::simclock
