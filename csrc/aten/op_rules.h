#pragma once
// The checks and output rules that generated adapters call. Each function takes
// the operator's name so every error says which op and which argument failed.
// torch_simhpu/_rules.py holds the same rules for fake kernels; keep them in step.
#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <functional>
#include <initializer_list>
#include <optional>
#include <vector>

namespace simhpu::rules {

// Output shapes: small, and built on every launch, so kept off the heap.
using Shape = c10::SmallVector<int64_t, 6>;
// Tensors named in a rule, by reference (no reference-count traffic per call).
using TensorRefs = std::initializer_list<std::reference_wrapper<const at::Tensor>>;

// `t` is defined and lives on simhpu (and on the same device as `first`).
void check_device(const char* op, const char* arg, const at::Tensor& t);
void check_device(const char* op, const char* arg, const at::Tensor& t, const at::Tensor& first);
void check_device(const char* op, const char* arg, const std::optional<at::Tensor>& t, const at::Tensor& first);

void check_device(const char* op, const char* arg, at::TensorList list, const at::Tensor& first);

// `t`'s dtype is one of `allowed`.
void check_dtype(const char* op, const char* arg, const at::Tensor& t,
                 std::initializer_list<c10::ScalarType> allowed);

// `t` has the same dtype as `ref`.
void check_same_dtype(const char* op, const char* arg, const at::Tensor& t,
                      const char* ref_arg, const at::Tensor& ref);

// The dtype PyTorch's type promotion gives `tensors` (as for a binary op).
c10::ScalarType promote_types(TensorRefs tensors);

// `dtype`, which `args` promote to, is one of `allowed`.
void check_compute_dtype(const char* op, std::initializer_list<const char*> args, c10::ScalarType dtype,
                         std::initializer_list<c10::ScalarType> allowed);

// A written tensor and an input may be the same memory, or apart, but not partly overlap.
void check_no_partial_overlap(const char* op, const char* written_arg, const at::Tensor& written,
                              const char* read_arg, const at::Tensor& read);

// An out= argument: on `first`'s device, of `dtype`; resized to `shape` when it
// differs; with no two elements in the same memory.
void prepare_out(const char* op, const char* arg, const at::Tensor& out, const at::Tensor& first,
                 c10::ScalarType dtype, c10::IntArrayRef shape);

// An in-place op's result has `self`'s shape and dtype.
void check_inplace(const char* op, const at::Tensor& self, c10::IntArrayRef shape, c10::ScalarType dtype);

// `a` and `b` have equal shapes.
void check_same_shape(const char* op, const char* a_arg, const at::Tensor& a,
                      const char* b_arg, const at::Tensor& b);

void check_same_shape(const char* op, const char* a_arg, const at::Tensor& a,
                      const char* b_arg, at::TensorList b);

// `t` broadcasts to `shape` (the output of an elementwise op).
void check_broadcastable(const char* op, const char* arg, const at::Tensor& t, c10::IntArrayRef shape);

// `a` (if given) broadcasts to `b`'s shape without changing it.
void check_broadcasts_to(const char* op, const char* a_arg, const at::Tensor& a, const char* b_arg,
                         const at::Tensor& b);
void check_broadcasts_to(const char* op, const char* a_arg, const std::optional<at::Tensor>& a, const char* b_arg,
                         const at::Tensor& b);

// A Scalar argument (if given) converts to the dtype a kernel computes `dtype` in
// (float for half and bfloat16), as the kernel will convert it: no overflow, no
// imaginary part for a real dtype.
void check_scalar_fits(const char* op, const char* arg, const c10::Scalar& value, c10::ScalarType dtype);
void check_scalar_fits(const char* op, const char* arg, const std::optional<c10::Scalar>& value,
                       c10::ScalarType dtype);

// Two out= arguments of one call may not share memory: the kernel writes both.
void check_outputs_apart(const char* op, const char* a_arg, const at::Tensor& a, const char* b_arg,
                         const at::Tensor& b);

// `index` holds indices: int64 or int32, and at most one dimension.
void check_index_tensor(const char* op, const char* arg, const at::Tensor& index);

// A str argument is one of the words `allowed`.
void check_one_of(const char* op, const char* arg, c10::string_view value,
                  std::initializer_list<const char*> allowed);

// `inner`'s shape equals the trailing dimensions of `outer` (layer-norm style).
void check_trailing_shape(const char* op, const char* outer_arg, const at::Tensor& outer,
                          const char* inner_arg, const at::Tensor& inner);

// gather's index fits `self`: the same number of dimensions, and in every
// dimension but `dim` no larger than self (the kernel would read past it).
void check_gather_index(const char* op, const char* self_arg, const at::Tensor& self, int64_t dim,
                        const char* index_arg, const at::Tensor& index);

// `inner` is 1-D with the size of `outer`'s last dimension (a per-column parameter).
void check_last_dim(const char* op, const char* outer_arg, const at::Tensor& outer,
                    const char* inner_arg, const at::Tensor& inner);

// `stat` holds one value per row of `x`: x's shape with the last dimension 1.
void check_row_stat(const char* op, const char* stat_arg, const at::Tensor& stat,
                    const char* x_arg, const at::Tensor& x);

// Autograd: `t` (an input without a formula in derivatives.yaml) must not require grad.
void check_no_requires_grad(const char* op, const char* arg, const at::Tensor& t);
void check_no_requires_grad(const char* op, const char* arg, const std::optional<at::Tensor>& t);
void check_no_requires_grad(const char* op, const char* arg, at::TensorList list);

// `t` carries no forward-mode tangent: ops without forward formulas refuse dual
// tensors (as PyTorch's generated kernels do) instead of dropping the tangent.
void check_no_forward_grad(const char* op, const char* arg, const at::Tensor& t);
void check_no_forward_grad(const char* op, const char* arg, const std::optional<at::Tensor>& t);
void check_no_forward_grad(const char* op, const char* arg, at::TensorList list);

// A new output on the current device (the adapter's DeviceGuard chose it),
// straight from the device allocator: an adapter allocating through at::empty
// would pay for two more trips through the dispatcher on every launch.
at::Tensor new_output(c10::IntArrayRef size, c10::ScalarType dtype);

// An elementwise operator's new output, laid out as PyTorch lays it out: in the
// order of its operands' strides (TensorIterator's rule), so that the result of
// adding to a transposed tensor is transposed too, on simhpu as on a part.
// Contiguous operands give a contiguous output without asking.
at::Tensor elementwise_output(c10::IntArrayRef size, c10::ScalarType dtype, TensorRefs operands);

// Output shapes.
Shape same_shape(const at::Tensor& t);
inline Shape as_shape(c10::IntArrayRef sizes) { return Shape(sizes.begin(), sizes.end()); }
inline Shape as_shape(c10::SymIntArrayRef sizes) { return as_shape(C10_AS_INTARRAYREF_SLOW(sizes)); }
inline Shape as_shape(std::initializer_list<int64_t> sizes) { return Shape(sizes); }
Shape broadcast_shapes(const char* op, std::initializer_list<const char*> args, TensorRefs tensors);
// `self`'s shape with dimension `dim` as long as `index` (index_select).
Shape index_shape(const char* op, const char* self_arg, const at::Tensor& self, int64_t dim,
                  const char* index_arg, const at::Tensor& index);
Shape reduced_shape(const char* op, const char* arg, const at::Tensor& t,
                    c10::IntArrayRef dims, bool keepdim);

// Official ops: whether this call can run on the device kernel (all tensors on
// one simhpu device, or 0-dim CPU scalars; `dtype` supported). If not, the
// adapter sends the call to the CPU fallback instead.
bool runs_natively(std::initializer_list<at::Tensor> tensors, c10::ScalarType dtype,
                   std::initializer_list<c10::ScalarType> supported);

// All simhpu tensors among `tensors` are on one device (CPU tensors are ignored).
void check_one_device(const char* op, std::initializer_list<at::Tensor> tensors);

// The simhpu device of the first device tensor among `tensors`.
c10::Device operands_device(std::initializer_list<at::Tensor> tensors);

// Whether a stub entry's kernel serves the call: the tensors read have dtypes
// among `supported`, those written those or bool (a comparison's result); all
// strided, on one simhpu device (a 0-dim CPU tensor may be read, as a number).
bool stub_runs_natively(std::initializer_list<at::Tensor> read, std::initializer_list<at::Tensor> written,
                        std::initializer_list<c10::ScalarType> supported);

// `t` on `device` with `dtype` (moves wrapped CPU scalars, casts if needed).
// A device tensor of another dtype is converted for a kernel that takes one
// dtype: simhpu's own work, since a part's kernel converts as it reads.
at::Tensor as_operand(const at::Tensor& t, c10::Device device, c10::ScalarType dtype);

// Before a launch whose operands as_operand converted: describes the launch as
// reading the program's tensors as they were given (a bfloat16 operand read as
// two bytes an element, a broadcast one once), for the runtime's observers.
void describe_reads_as_given(TensorRefs given, TensorRefs outputs, c10::ScalarType dtype);

// A host tensor moved to the device for one launch only: queued, never a
// blocking transfer (the host does not wait).
at::Tensor staged_to_device(const at::Tensor& host, c10::Device device, c10::ScalarType dtype);

} // namespace simhpu::rules
