// nn.LSTM, nn.GRU and nn.RNN as the part runs them. On a GPU PyTorch hands a whole stack of
// recurrent layers to cuDNN (at::native::lstm takes its cuDNN route for a CUDA input), whose
// kernels are a GEMM over every time step's input, then a recurrent GEMM and a cell kernel a
// time step, and the same backwards. simhpu runs ATen's composite instead: a dozen operators a
// time step, each an operator the host dispatches and autograd records. While simulated time is
// on, a call is priced as cuDNN's kernels (sim_clock.h, LibraryCall) and the composite's launches
// are not the part's; the composite still computes the values.
//
// The kernels follow cuDNN's standard algorithm (cudnnRNNForward / cudnnRNNBackwardData /
// cudnnRNNBackwardWeights), layer by layer and direction by direction:
//   forward:  input GEMM [T*B, in] x [in, G*H]; per step a recurrent GEMM [B, R] x [R, G*H]
//             (and [B, H] x [H, R] with projections), and a cell kernel; dropout between layers;
//   backward: per step a cell kernel and the state's GEMM [B, G*H] x [G*H, R]; then the input's
//             gradient [T*B, G*H] x [G*H, in], the weights' [G*H, T*B] x [T*B, in] and
//             [G*H, T*B] x [T*B, R], and the biases' column sum;
// with G gates (LSTM 4, GRU 3, RNN 1), H the cell's width and R the state's (H, or an LSTM's
// projection). Under autocast PyTorch casts and re-flattens the weights for cuDNN each call (a copy).
// A packed sequence (pack_padded_sequence: the .data overloads) runs each step over the sequences
// still running, its batch sizes', as cuDNN does. A single LSTM or GRU cell (below) is priced as
// ATen's CUDA route runs it: its two GEMMs and one fused cell kernel.
#include "simclock/sim_clock.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/gru_cell_native.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_cell_native.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/rnn_relu_native.h>
#include <ATen/ops/rnn_tanh_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

namespace simhpu::simclock {
namespace {

struct RecurrentStack {
  int64_t gates = 1;                       // LSTM 4, GRU 3, RNN 1
  // The sequences each time step takes: B every step, or a packed sequence's batch sizes (its
  // sequences sorted longest first, a step takes those still running); their sum, the rows.
  std::vector<int64_t> step_batches;
  int64_t rows = 0;
  int64_t input = 0;                        // the first layer's input width
  int64_t hidden = 0, state = 0;           // H (the cell's width), R (the state's: H, or the projection's)
  int64_t layers = 1, directions = 1;
  bool biases = true, dropout = false;
  c10::ScalarType dtype = c10::ScalarType::Float;  // what cuDNN computes in
  int64_t weight_elements = 0;
  c10::ScalarType weight_dtype = c10::ScalarType::Float;
};

// What the part's library computes in: autocast's type where the program turned it on (PyTorch casts
// the operands for cuDNN's RNN and for the fused cells), else the input's.
c10::ScalarType compute_dtype(const at::Tensor& input) {
  return at::autocast::is_autocast_enabled(c10::DeviceType::PrivateUse1)
             ? at::autocast::get_autocast_dtype(c10::DeviceType::PrivateUse1)
             : input.scalar_type();
}

double element_size(c10::ScalarType dtype) {
  return static_cast<double>(c10::elementSize(dtype));
}

LibraryKernel gemm(const char* name, int64_t m, int64_t n, int64_t k, c10::ScalarType dtype) {
  LibraryKernel kernel{name, LaunchWork{}, KernelTraits{}};
  kernel.work.work = Work::Matrix;
  kernel.work.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  kernel.work.bytes = static_cast<double>(m * k + k * n + m * n) * element_size(dtype);
  kernel.work.dtype = dtype;
  kernel.work.gemm_batch = 1;
  kernel.work.gemm_m = m;
  kernel.work.gemm_n = n;
  kernel.work.gemm_k = k;
  // (cuDNN's float32 GEMMs run in TF32 where the program lets cuDNN use it, as convolutions do)
  kernel.traits.tf32 = at::globalContext().allowTF32CuDNN();
  return kernel;
}

LibraryKernel vector(const char* name, int64_t elements, double bytes, c10::ScalarType dtype, MemoryClass memory_class,
                     int64_t reduced_rows = 0) {
  LibraryKernel kernel{name, LaunchWork{}, KernelTraits{}};
  kernel.work.work = Work::Vector;
  kernel.work.flops = static_cast<double>(elements);
  kernel.work.bytes = bytes;
  kernel.work.dtype = dtype;
  kernel.traits.memory_class = memory_class;
  kernel.traits.reduced_rows = reduced_rows;
  return kernel;
}

int64_t layer_input(const RecurrentStack& r, int64_t layer) {
  return layer == 0 ? r.input : r.directions * r.state;
}

bool casts_weights(const RecurrentStack& r) {
  return r.weight_dtype != r.dtype;
}

std::vector<LibraryKernel> forward_kernels(const RecurrentStack& r) {
  const double size = element_size(r.dtype);
  const int64_t gated = r.gates * r.hidden, rows = r.rows;
  std::vector<LibraryKernel> out;
  if (casts_weights(r)) {
    out.push_back(vector("cudnn_rnn (weights cast and flattened)", r.weight_elements,
                         static_cast<double>(r.weight_elements) * (element_size(r.weight_dtype) + size), r.dtype,
                         MemoryClass::Copy));
  }
  for (int64_t layer = 0; layer < r.layers; ++layer) {
    for (int64_t direction = 0; direction < r.directions; ++direction) {
      out.push_back(gemm("cudnn_rnn (input GEMM)", rows, gated, layer_input(r, layer), r.dtype));
      for (const int64_t batch : r.step_batches) {
        out.push_back(gemm("cudnn_rnn (recurrent GEMM)", batch, gated, r.state, r.dtype));
        // (reads both GEMMs' gates and the cell's state, writes the states and keeps the gates for the backward)
        const int64_t cell = batch * (3 * gated + 3 * r.hidden);
        out.push_back(vector("cudnn_rnn (cell)", batch * gated, static_cast<double>(cell) * size, r.dtype,
                             MemoryClass::Transcendental));
        if (r.state != r.hidden) out.push_back(gemm("cudnn_rnn (projection GEMM)", batch, r.state, r.hidden, r.dtype));
      }
    }
    if (r.dropout && layer + 1 < r.layers) {
      const int64_t elements = rows * r.directions * r.state;
      out.push_back(vector("cudnn_rnn (dropout)", elements, static_cast<double>(elements) * (2 * size + 1), r.dtype,
                           MemoryClass::Random));
    }
  }
  return out;
}

std::vector<LibraryKernel> backward_kernels(const RecurrentStack& r) {
  const double size = element_size(r.dtype);
  const int64_t gated = r.gates * r.hidden, rows = r.rows;
  std::vector<LibraryKernel> out;
  for (int64_t layer = r.layers - 1; layer >= 0; --layer) {
    if (r.dropout && layer + 1 < r.layers) {
      const int64_t elements = rows * r.directions * r.state;
      out.push_back(vector("cudnn_rnn_backward (dropout)", elements, static_cast<double>(elements) * (2 * size + 1),
                           r.dtype, MemoryClass::Elementwise));
    }
    for (int64_t direction = 0; direction < r.directions; ++direction) {
      for (auto batch = r.step_batches.rbegin(); batch != r.step_batches.rend(); ++batch) {
        if (r.state != r.hidden) {
          out.push_back(gemm("cudnn_rnn_backward (projection GEMM)", *batch, r.hidden, r.state, r.dtype));
        }
        // (reads the kept gates, the states and their gradients, writes the gates' and the cell's gradients)
        const int64_t cell = *batch * (2 * gated + 4 * r.hidden);
        out.push_back(vector("cudnn_rnn_backward (cell)", *batch * gated, static_cast<double>(cell) * size, r.dtype,
                             MemoryClass::Transcendental));
        out.push_back(gemm("cudnn_rnn_backward (recurrent GEMM)", *batch, r.state, gated, r.dtype));
      }
      out.push_back(gemm("cudnn_rnn_backward (input gradient GEMM)", rows, layer_input(r, layer), gated, r.dtype));
      out.push_back(gemm("cudnn_rnn_backward (input weights GEMM)", gated, layer_input(r, layer), rows, r.dtype));
      out.push_back(gemm("cudnn_rnn_backward (recurrent weights GEMM)", gated, r.state, rows, r.dtype));
      if (r.state != r.hidden) {
        out.push_back(gemm("cudnn_rnn_backward (projection weights GEMM)", r.state, r.hidden, rows, r.dtype));
      }
      if (r.biases) {
        out.push_back(vector("cudnn_rnn_backward (bias sums)", gated, static_cast<double>(rows * gated) * size,
                             r.dtype, MemoryClass::ColumnReduction, rows));
      }
    }
  }
  if (casts_weights(r)) {
    out.push_back(vector("cudnn_rnn_backward (weights' gradients cast)", r.weight_elements,
                         static_cast<double>(r.weight_elements) * (element_size(r.weight_dtype) + size),
                         r.weight_dtype, MemoryClass::Copy));
  }
  return out;
}

// The stack a call describes, or nothing where the part's library would not take it (not a floating-
// point sequence on the device). `step_batches`: the sequences each time step takes.
std::optional<RecurrentStack> stack_of(int64_t gates, const at::Tensor& input, std::vector<int64_t> step_batches,
                                       const at::Tensor& state, const at::Tensor& cell, at::TensorList params,
                                       bool has_biases, int64_t num_layers, double dropout, bool train,
                                       bool bidirectional) {
  if (!input.is_privateuseone() || !at::isFloatingType(input.scalar_type()) || state.dim() != 3 || params.empty() ||
      step_batches.empty()) {
    return std::nullopt;
  }
  RecurrentStack r;
  r.gates = gates;
  r.step_batches = std::move(step_batches);
  for (const int64_t batch : r.step_batches) r.rows += batch;
  r.input = input.size(-1);
  r.state = state.size(2);
  r.hidden = cell.size(2);
  r.layers = num_layers;
  r.directions = bidirectional ? 2 : 1;
  r.biases = has_biases;
  r.dropout = train && dropout > 0;
  r.weight_dtype = params[0].scalar_type();
  r.dtype = compute_dtype(input);
  for (const at::Tensor& p : params) r.weight_elements += p.numel();
  return r;
}

// A padded batch [T, B, in] (or [B, T, in]): B sequences every step.
std::vector<int64_t> padded_steps(const at::Tensor& input, bool batch_first) {
  if (input.dim() != 3) return {};
  return std::vector<int64_t>(input.size(batch_first ? 1 : 0), input.size(batch_first ? 0 : 1));
}

// A packed sequence's batch sizes (a CPU tensor of int64, as pack_padded_sequence makes it).
std::vector<int64_t> packed_steps(const at::Tensor& data, const at::Tensor& batch_sizes) {
  if (data.dim() != 2 || batch_sizes.dim() != 1 || !batch_sizes.is_cpu() ||
      batch_sizes.scalar_type() != c10::ScalarType::Long) {
    return {};
  }
  const at::Tensor sizes = batch_sizes.contiguous();
  const int64_t* first = sizes.const_data_ptr<int64_t>();
  return std::vector<int64_t>(first, first + sizes.numel());
}

c10::Stream current_stream(const at::Tensor& input) {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getStream(input.device());
}

// Opens the call where the part's library would take it; the composite runs either way.
void open(std::optional<LibraryCall>& call, const std::optional<RecurrentStack>& stack, const at::Tensor& input) {
  if (stack) call.emplace(current_stream(input), forward_kernels(*stack), backward_kernels(*stack));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(const at::Tensor& input, at::TensorList hx, at::TensorList params,
                                                    bool has_biases, int64_t num_layers, double dropout, bool train,
                                                    bool bidirectional, bool batch_first) {
  std::optional<LibraryCall> call;
  if (enabled() && hx.size() == 2) {
    open(call, stack_of(4, input, padded_steps(input, batch_first), hx[0], hx[1], params, has_biases, num_layers,
                        dropout, train, bidirectional), input);
  }
  return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> packed_lstm(const at::Tensor& data, const at::Tensor& batch_sizes,
                                                           at::TensorList hx, at::TensorList params, bool has_biases,
                                                           int64_t num_layers, double dropout, bool train,
                                                           bool bidirectional) {
  std::optional<LibraryCall> call;
  if (enabled() && hx.size() == 2) {
    open(call, stack_of(4, data, packed_steps(data, batch_sizes), hx[0], hx[1], params, has_biases, num_layers,
                        dropout, train, bidirectional), data);
  }
  return at::native::lstm(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional);
}

// gru, rnn_tanh and rnn_relu share a signature: (output, the last state), on a padded batch or a packed one.
using SingleState = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor&, const at::Tensor&, at::TensorList, bool,
                                                            int64_t, double, bool, bool, bool);
using PackedSingleState = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                                  at::TensorList, bool, int64_t, double, bool, bool);

template <int64_t Gates, SingleState Composite>
std::tuple<at::Tensor, at::Tensor> single_state(const at::Tensor& input, const at::Tensor& hx, at::TensorList params,
                                                bool has_biases, int64_t num_layers, double dropout, bool train,
                                                bool bidirectional, bool batch_first) {
  std::optional<LibraryCall> call;
  if (enabled()) {
    open(call, stack_of(Gates, input, padded_steps(input, batch_first), hx, hx, params, has_biases, num_layers,
                        dropout, train, bidirectional), input);
  }
  return Composite(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
}

template <int64_t Gates, PackedSingleState Composite>
std::tuple<at::Tensor, at::Tensor> packed_single_state(const at::Tensor& data, const at::Tensor& batch_sizes,
                                                       const at::Tensor& hx, at::TensorList params, bool has_biases,
                                                       int64_t num_layers, double dropout, bool train,
                                                       bool bidirectional) {
  std::optional<LibraryCall> call;
  if (enabled()) {
    open(call, stack_of(Gates, data, packed_steps(data, batch_sizes), hx, hx, params, has_biases, num_layers, dropout,
                        train, bidirectional), data);
  }
  return Composite(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional);
}

// A single step's cell (nn.LSTMCell, nn.GRUCell, a decoder's loop): on a GPU ATen computes both
// gates' GEMMs, then the cell in one fused kernel (_thnn_fused_lstm_cell, _thnn_fused_gru_cell) and
// its backward in one more; the device runs the composite's elementwise operators instead, each an
// operator, a launch and an autograd node. The part's call records five nodes: the fused cell's and
// each GEMM's with its weight's transpose.
constexpr int kCellBackwardNodes = 5;

struct Cell {
  int64_t gates, batch, input, hidden;
  bool biases;
  c10::ScalarType dtype;
};

std::optional<Cell> cell_of(int64_t gates, const at::Tensor& input, const at::Tensor& w_ih,
                            const std::optional<at::Tensor>& b_ih) {
  if (!input.is_privateuseone() || !at::isFloatingType(input.scalar_type()) || input.dim() != 2 || w_ih.dim() != 2) {
    return std::nullopt;
  }
  return Cell{gates, input.size(0), input.size(1), w_ih.size(0) / gates, b_ih.has_value() && b_ih->defined(),
              compute_dtype(input)};
}

std::vector<LibraryKernel> cell_forward(const Cell& c) {
  const int64_t gated = c.gates * c.hidden;
  const double size = element_size(c.dtype);
  return {gemm("fused_rnn_cell (input GEMM)", c.batch, gated, c.input, c.dtype),
          gemm("fused_rnn_cell (hidden GEMM)", c.batch, gated, c.hidden, c.dtype),
          vector("fused_rnn_cell (cell)", c.batch * gated,
                 static_cast<double>(c.batch * (3 * gated + 3 * c.hidden)) * size, c.dtype, MemoryClass::Transcendental)};
}

std::vector<LibraryKernel> cell_backward(const Cell& c) {
  const int64_t gated = c.gates * c.hidden;
  const double size = element_size(c.dtype);
  std::vector<LibraryKernel> out{vector("fused_rnn_cell_backward (cell)", c.batch * gated,
                                        static_cast<double>(c.batch * (2 * gated + 4 * c.hidden)) * size, c.dtype,
                                        MemoryClass::Transcendental)};
  if (c.biases) {
    out.push_back(vector("fused_rnn_cell_backward (bias sums)", gated, static_cast<double>(c.batch * gated) * size,
                         c.dtype, MemoryClass::ColumnReduction, c.batch));
  }
  out.push_back(gemm("fused_rnn_cell_backward (input gradient GEMM)", c.batch, c.input, gated, c.dtype));
  out.push_back(gemm("fused_rnn_cell_backward (input weights GEMM)", gated, c.input, c.batch, c.dtype));
  out.push_back(gemm("fused_rnn_cell_backward (hidden gradient GEMM)", c.batch, c.hidden, gated, c.dtype));
  out.push_back(gemm("fused_rnn_cell_backward (hidden weights GEMM)", gated, c.hidden, c.batch, c.dtype));
  return out;
}

void open_cell(std::optional<LibraryCall>& call, const std::optional<Cell>& cell, const at::Tensor& input) {
  if (cell) call.emplace(current_stream(input), cell_forward(*cell), cell_backward(*cell), kCellBackwardNodes);
}

std::tuple<at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input, at::TensorList hx, const at::Tensor& w_ih,
                                             const at::Tensor& w_hh, const std::optional<at::Tensor>& b_ih,
                                             const std::optional<at::Tensor>& b_hh) {
  std::optional<LibraryCall> call;
  if (enabled()) open_cell(call, cell_of(4, input, w_ih, b_ih), input);
  return at::native::lstm_cell(input, hx, w_ih, w_hh, b_ih, b_hh);
}

at::Tensor gru_cell(const at::Tensor& input, const at::Tensor& hx, const at::Tensor& w_ih, const at::Tensor& w_hh,
                    const std::optional<at::Tensor>& b_ih, const std::optional<at::Tensor>& b_hh) {
  std::optional<LibraryCall> call;
  if (enabled()) open_cell(call, cell_of(3, input, w_ih, b_ih), input);
  return at::native::gru_cell(input, hx, w_ih, w_hh, b_ih, b_hh);
}

void register_recurrent_layers(torch::Library& m) {
  m.impl("lstm_cell", TORCH_FN(lstm_cell));
  m.impl("gru_cell", TORCH_FN(gru_cell));
  m.impl("lstm.input", TORCH_FN(lstm));
  m.impl("lstm.data", TORCH_FN(packed_lstm));
  m.impl("gru.input", TORCH_FN((single_state<3, &at::native::gru>)));
  m.impl("gru.data", TORCH_FN((packed_single_state<3, &at::native::gru>)));
  m.impl("rnn_tanh.input", TORCH_FN((single_state<1, &at::native::rnn_tanh>)));
  m.impl("rnn_tanh.data", TORCH_FN((packed_single_state<1, &at::native::rnn_tanh>)));
  m.impl("rnn_relu.input", TORCH_FN((single_state<1, &at::native::rnn_relu>)));
  m.impl("rnn_relu.data", TORCH_FN((packed_single_state<1, &at::native::rnn_relu>)));
}

} // namespace

// At autograd's key the composite records the graph as ever (the call sees the nodes it recorded);
// at the device's, what inference mode reaches, it records none.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  register_recurrent_layers(m);
}
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_recurrent_layers(m);
}

} // namespace simhpu::simclock
