"""What the part's libraries would run for an operator: its memory class, its attention
backend, whether a float32 matmul may go in TF32.

The device runs ATen's CPU kernels; a part runs its own. Pricing a launch as the part would
take it needs three facts the CPU kernel does not carry:

- a vector kernel's *class* (csrc/runtime/launch_work.h, MemoryClass): a reduction reads its
  input once and writes a scalar, a softmax over long rows passes over them more than once, a
  norm computes statistics before it writes; each class has its own price in the profile;
- which fused attention kernel scaled_dot_product_attention would take there: PyTorch tries
  its backends in a priority order (the part's: on Hopper with a recent cuDNN, cuDNN first)
  and takes the first whose constraints the call meets and the program left enabled
  (`torch.nn.attention.sdpa_kernel`, `torch.backends.cuda.enable_*_sdp`);
- TF32: a float32 matmul runs on the tensor cores when the program allows it
  (`torch.backends.cuda.matmul.allow_tf32`, `torch.set_float32_matmul_precision("high")`);
  convolutions when `torch.backends.cudnn.allow_tf32` does (on by default).
"""
from __future__ import annotations

import torch

# ---------------------------------------------------------------------------------------
# Memory classes, by ATen operator name (overloads share their packet's class).
# ---------------------------------------------------------------------------------------

_CLASSES = {
    "transcendental": (
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "sigmoid", "silu", "mish",
        "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "pow", "rsqrt",
        "softplus", "elu", "selu", "celu", "logit", "silu_backward", "sigmoid_backward",
        "tanh_backward", "mish_backward", "softplus_backward", "elu_backward", "xlogy",
        "hardswish", "hardsigmoid", "hardswish_backward", "logaddexp", "logaddexp2",
    ),
    # (a GPU runs these at its memory's speed too; a CPU's cores take several times an exp's time an element)
    "special": ("gelu", "gelu_backward", "erf", "erfc", "erfinv", "special_erfcx", "lgamma", "digamma"),
    "reduction": (
        "sum", "mean", "amax", "amin", "aminmax", "max", "min", "argmax", "argmin", "prod", "norm",
        "linalg_vector_norm", "var", "std", "var_mean", "std_mean", "all", "any", "logsumexp", "nansum",
        "count_nonzero", "_local_scalar_dense", "sum_to_size", "cumsum", "cumprod", "logcumsumexp", "cummax",
        "cummin", "mode", "median", "nanmedian", "topk", "sort", "kthvalue",
    ),
    "softmax": ("_softmax", "_log_softmax", "softmax", "log_softmax", "_safe_softmax", "_masked_softmax"),
    # (its own class: a forward passes over a row for its maximum and its sum before it writes, a
    # backward once for a dot product; on a part they take different shares of their bytes' time)
    "softmax_backward": ("_softmax_backward_data", "_log_softmax_backward_data", "_masked_softmax_backward"),
    "norm": (
        "native_layer_norm", "native_group_norm", "_fused_rms_norm", "rms_norm",
    ),
    "norm_backward": (
        "native_layer_norm_backward", "native_group_norm_backward", "_fused_rms_norm_backward",
    ),
    # (statistics over the batch and the image, per channel: on a GPU, PyTorch's NCHW kernels reduce
    # a channel a block, far from the memory's speed; measured apart from the row-wise norms)
    "batch_norm": (
        "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
        "_batch_norm_with_update", "_batch_norm_no_update", "batch_norm_stats", "batch_norm_elemt",
        "batch_norm_gather_stats_with_counts", "instance_norm", "cudnn_batch_norm", "miopen_batch_norm",
    ),
    "batch_norm_backward": (
        "native_batch_norm_backward", "batch_norm_backward", "batch_norm_backward_reduce", "batch_norm_backward_elemt",
        "cudnn_batch_norm_backward", "miopen_batch_norm_backward",
    ),
    "pooling": (
        "max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool2d", "max_pool1d", "avg_pool2d", "avg_pool3d",
        "adaptive_avg_pool2d", "_adaptive_avg_pool2d", "adaptive_max_pool2d", "_adaptive_avg_pool3d",
        "adaptive_max_pool3d", "fractional_max_pool2d", "max_unpool2d",
    ),
    "pooling_backward": (
        "max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward", "avg_pool2d_backward",
        "avg_pool3d_backward", "_adaptive_avg_pool2d_backward", "adaptive_max_pool2d_backward",
        "_adaptive_avg_pool3d_backward", "adaptive_max_pool3d_backward", "fractional_max_pool2d_backward",
    ),
    "index": (
        "embedding", "embedding_dense_backward", "embedding_backward", "index_select", "gather", "scatter",
        "scatter_add", "scatter_reduce", "index_add", "index", "index_put", "_index_put_impl", "take", "index_copy",
        "index_fill", "masked_scatter", "masked_select", "embedding_bag", "_embedding_bag",
        "_embedding_bag_backward",
    ),
    # (their batched copy kernel, an input's piece of the output a block: not a plain copy's pass)
    "concatenation": ("cat", "stack"),
    "copy": (
        "copy", "clone", "_to_copy", "constant_pad_nd", "repeat", "repeat_interleave",
        "_unsafe_view", "flip", "roll", "tril", "triu", "reflection_pad1d", "reflection_pad2d",
        "replication_pad1d", "replication_pad2d", "im2col", "col2im", "pixel_shuffle", "pixel_unshuffle",
        "contiguous", "_copy_from", "_copy_from_and_resize",
    ),
    "random": (
        "native_dropout", "bernoulli", "uniform", "normal", "randn", "rand", "randint", "randperm", "exponential",
        "geometric", "log_normal", "cauchy", "random", "multinomial", "rand_like", "randn_like", "randint_like",
    ),
    "loss": (
        "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward", "nll_loss",
        "mse_loss", "mse_loss_backward", "binary_cross_entropy", "binary_cross_entropy_backward",
        "smooth_l1_loss", "huber_loss", "l1_loss", "kl_div", "multilabel_margin_loss_forward",
    ),
}
_MULTI_TENSOR_PREFIXES = ("_foreach_",)
# (a fused optimizer reads and writes each state once; a foreach step's operators pass over them several times)
_FUSED_OPTIMIZER_PREFIXES = ("_fused_adam", "_fused_sgd", "_fused_adagrad")


def memory_class(name: str) -> str:
    """The memory class of ATen operator `name` (with or without 'aten::', an overload, a trailing '_')."""
    base = name.split("::")[-1].split(".")[0]
    if base.startswith(_MULTI_TENSOR_PREFIXES):
        return "multi_tensor"
    if base.startswith(_FUSED_OPTIMIZER_PREFIXES):
        return "fused_optimizer"
    stem = base[:-1] if base.endswith("_") else base  # (an in-place variant: its operator's class)
    for cls, names in _CLASSES.items():
        if base in names or stem in names:
            return cls
    return "elementwise"


def op_classes() -> dict[str, str]:
    """Every operator registered now whose class is not elementwise: {'aten::_softmax': 'softmax', ...}."""
    out = {}
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        cls = memory_class(schema.name)
        if cls != "elementwise":
            out[schema.name] = cls
    return out


# ---------------------------------------------------------------------------------------
# Attention: the backend PyTorch would take on the part.
# ---------------------------------------------------------------------------------------

BACKENDS = ("flash", "cudnn", "efficient")  # the order of AttentionBackend (csrc/simclock/device_profile.h)
_TORCH_ORDER = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}  # at::SDPBackend's values
_DEFAULT_ORDER = tuple(torch._C._get_sdp_priority_order()) if hasattr(torch._C, "_get_sdp_priority_order") else ()
_HALF = (torch.float16, torch.bfloat16)


def _enabled(backend: str) -> bool:
    cuda = torch.backends.cuda
    return {"flash": cuda.flash_sdp_enabled, "cudnn": cuda.cudnn_sdp_enabled,
            "efficient": cuda.mem_efficient_sdp_enabled, "math": cuda.math_sdp_enabled}[backend]()


RULES = ("cuda", "cpu")  # whose SDPA constraints a part follows (a profile's attention.rules)


def _meets(backend: str, dtype: torch.dtype, head_dim: int, masked: bool, rules: str = "cuda") -> bool:
    """The call's constraints, as PyTorch's sdp_utils state them for each kernel family: on a
    CPU, its one fused kernel (flash) takes every floating dtype, head dim and mask."""
    if backend == "math":
        return True
    if rules == "cpu":
        return backend == "flash" and dtype in (*_HALF, torch.float32, torch.float64)
    if backend == "flash":
        return dtype in _HALF and head_dim <= 256 and head_dim % 8 == 0 and not masked
    if backend == "cudnn":
        return (dtype in _HALF and head_dim <= 128 and head_dim % 8 == 0
                and not torch.are_deterministic_algorithms_enabled())
    if backend == "efficient":
        alignment = 8 if dtype in _HALF else 4
        return dtype in (*_HALF, torch.float32) and head_dim % alignment == 0
    return False


def attention_backend(priority: list[str], dtype: torch.dtype, head_dim: int, *, masked: bool = False,
                      rules: str = "cuda") -> str:
    """The backend scaled_dot_product_attention takes on a part whose order is `priority`: the
    program's own order where it set one (sdpa_kernel(..., set_priority=True)), the first
    enabled backend whose constraints the call meets."""
    order = list(priority)
    current = tuple(torch._C._get_sdp_priority_order()) if _DEFAULT_ORDER else ()
    if current and current != _DEFAULT_ORDER:
        order = [_TORCH_ORDER[b] for b in current if b in _TORCH_ORDER]
    for backend in order:
        if _enabled(backend) and _meets(backend, dtype, head_dim, masked, rules):
            return backend
    return "math"


def tf32_allowed(convolution: bool) -> bool:
    """Whether the program lets a float32 matmul (or convolution) run in TF32 on the part."""
    if convolution:
        return bool(torch.backends.cudnn.allow_tf32)
    # (what cuBLAS's float32 GEMM asks: the flag both torch.set_float32_matmul_precision and
    # torch.backends.cuda.matmul.allow_tf32 / .fp32_precision set. torch.get_float32_matmul_precision()
    # would raise where a program set the backends apart, which a part runs without complaint.)
    return bool(torch.backends.cuda.matmul.allow_tf32)
