#pragma once
// What simulated time knows of a launch beyond its work (runtime/launch_work.h):
// what the part's libraries would run for it. Kept here, not in LaunchWork, so
// the runtime's and every adapter's headers stay as they are: only the
// simulated clock describes and reads these (sim_clock.cpp).
#include <cstdint>

namespace simhpu::simclock {

// How a vector kernel moves its bytes: each class has its own price on a part
// (the traffic its operands' bytes cause, the least such a kernel takes), fitted
// on measured kernels of the class. Named operator by operator by
// torch_simhpu/simulation/kernel_choice.py.
enum class MemoryClass : uint8_t {
  Elementwise,     // one pass: read the inputs, write the outputs
  Transcendental,  // elementwise with enough arithmetic to show (exp, silu, tanh, ...)
  Special,         // elementwise special functions (erf and the GELU family): a CPU's vector units, not its memory, bound them
  Reduction,       // reads its input once, writes far less
  ColumnReduction, // a reduction that keeps its input's contiguous dimension (x.sum(0), a bias's gradient): its rows walked in a chain
  Softmax,         // row-wise: passes for the row's maximum and sum, one to write
  SoftmaxInRegisters, // a softmax whose rows its threads hold in registers (device_profile.h, SoftmaxRows): scalar loads
  SoftmaxBackward, // row-wise: one pass for the row's dot product of output and gradient, one to write
  Norm,            // layer/batch/group/RMS norm forward: statistics, then the normalised write
  NormBackward,
  Index,           // gathers and scatters: embedding, index_select, index_add, scatter
  Copy,            // layout changes: copies between dtypes, cat, pads
  Transpose,       // a copy that reads across strides (x.t().contiguous()): what a Copy becomes then
  WideningCopy,    // a copy that writes wider elements than it reads (bfloat16 to float32): what a Copy becomes then
  Random,          // a generator's draws (dropout, bernoulli, normal)
  Loss,            // nll_loss and its kin
  MultiTensor,     // a _foreach_ operator's kernels: launched as CUDA's multi-tensor apply chunks them
  BatchNorm,       // batch norm's statistics over every dimension but the channels: a channels-first input's kernel runs a channel a block
  BatchNormBackward,
  Pooling,         // windows over an image (max/avg pooling): each input read by the windows that overlap it
  PoolingBackward, // the gradient scattered back to each window's inputs
  FusedOptimizer,  // a fused optimizer's kernels (fused=True): multi-tensor apply's chunks, every state in one pass
  BatchNormChannelsLast,          // a channels-last input's batch norm: other kernels, reducing across blocks (what a BatchNorm becomes then)
  BatchNormChannelsLastBackward,
  Concatenation,   // cat and stack: its batched copy kernel, each block a piece of one input (not a plain copy's pass)
  Count
};

const char* memory_class_name(MemoryClass c);

// Fused attention kernels a part's library has, in the profile's curves' order.
enum class AttentionBackend : uint8_t { Flash, Cudnn, Efficient, Count };

struct KernelTraits {
  MemoryClass memory_class = MemoryClass::Elementwise;
  AttentionBackend attention_backend = AttentionBackend::Flash;
  bool tf32 = false;  // a float32 matmul the program lets run in TF32
  bool convolution = false;  // a convolution (forward or backward): the profile's convolution efficiency
  bool convolution_backward = false;  // its backward: the profile's convolution backward efficiency, where given
  bool convolution_unaligned = false;  // input channels not a multiple of 8: the profile's unaligned efficiency
  // A channels-first convolution's operands and results its part's library converts to and
  // from the channels-last layout its kernels run (elements), a kernel each (conversions).
  int64_t converted_elements = 0;
  int64_t conversions = 0;
  // The kernels this launch stands for on the part (a multi-tensor apply's chunks), >= 1.
  int64_t kernels = 1;
  // A column reduction's reduced rows: each output's chain of adds; a channels-first
  // batch norm's elements its blocks walk in turn; a layer or RMS norm's rows (its
  // forward's, a block each; its backward's gamma/beta chain) (0: not one).
  int64_t reduced_rows = 0;
  // Elements a row-wise kernel's operator first copies into contiguous memory:
  // PyTorch's CUDA norms and softmaxes take their rows contiguous, so a strided
  // input (a transposed residual stream) costs a transposing copy kernel first.
  int64_t contiguous_copy_elements = 0;
  // Elements an elementwise kernel reads across its output's strides: an operand
  // laid out in another order than the output (TensorIterator walks the output's
  // order, so those reads do not coalesce, as a transposing copy's do not).
  int64_t elements_read_across_strides = 0;
  // Operands' offsets an elementwise kernel computes from each element's index (elements x
  // operands): PyTorch's TensorIterator takes its vectorised kernel only when every operand lies
  // as its dense output does; a broadcast operand or a strided view sends it to its generic
  // kernel, whose index arithmetic, not its bytes, then bounds it (0: vectorised).
  int64_t offsets_computed = 0;
};

} // namespace simhpu::simclock
