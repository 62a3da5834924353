"""The FLOPs and memory classes the simulated clocks price each operator with: PyTorch's
flop_counter formulas where it has them, and what a formula needs of the call (attention's
backend and shape, TF32, a GEMM's shape) passed with them to csrc/simclock.
"""
from __future__ import annotations

import math

import torch

from torch_simhpu import _C
from torch_simhpu.simulation import kernel_choice
from torch_simhpu.simulation.part_profiles import _profiles_in_use


_formulas_installed = False


# Fused attention operators: (pass: 1 forward, 2 backward; the index of is_causal in their arguments).
_ATTENTION = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": (1, 4),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (2, 7),
    "aten::_scaled_dot_product_flash_attention": (1, 4),
    "aten::_scaled_dot_product_flash_attention_backward": (2, 11),
    "aten::_scaled_dot_product_efficient_attention": (1, 6),
    "aten::_scaled_dot_product_cudnn_attention": (1, 6),
}


def _attention(name: str, args: list) -> tuple[int, bool, int, int, int, int] | None:
    """(pass, causal, the keys' sequence length, the head dim, the queries' sequence length, the queries'
    batch x heads) of a fused attention kernel, for its curve, its tiles and its blocks (launch_cost.cpp).
    (A grouped-query call's group is its operator's to say: the CPU kernel takes the key heads repeated.)"""
    if name not in _ATTENTION:
        return None
    direction, causal_at = _ATTENTION[name]
    try:
        # (a backward's first argument is the output's gradient)
        query, key = (args[1], args[2]) if direction == 2 else (args[0], args[1])
        causal = bool(args[causal_at]) if causal_at < len(args) else False
        heads = 1
        for size in query.shape[:-2]:
            heads *= int(size)
        return direction, causal, int(key.shape[-2]), int(query.shape[-1]), int(query.shape[-2]), heads
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def _attention_backend(name: str, args: list) -> str:
    """The SDPA backend the profile's part would take for this fused attention launch."""
    profile = _profiles_in_use.get(_C._simclock_profile_name() or "", {})
    priority = profile.get("attention", {}).get("priority", ["flash"])
    rules = profile.get("attention", {}).get("rules", "cuda")
    query = args[1] if _ATTENTION[name][0] == 2 else args[0]
    mask_at = {"aten::_scaled_dot_product_flash_attention_for_cpu": 5,
               "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 8}.get(name)
    masked = mask_at is not None and mask_at < len(args) and isinstance(args[mask_at], torch.Tensor)
    try:
        return kernel_choice.attention_backend(priority, query.dtype, int(query.shape[-1]), masked=masked, rules=rules)
    except (AttributeError, IndexError, TypeError, ValueError):
        return priority[0] if priority[0] != "math" else "flash"


def _tf32(name: str, args: list) -> bool:
    """A float32 matmul or convolution the program lets the part run in TF32."""
    tensors = [a for a in args[:3] if isinstance(a, torch.Tensor)]
    if not tensors or tensors[0].dtype != torch.float32:
        return False
    return kernel_choice.tf32_allowed(convolution="convolution" in name)


def _gemm_shape(name: str, args: list, outputs: list) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of the GEMM an operator is, for the matrix units' waves (launch_cost.cpp)."""
    try:
        if name in ("aten::mm", "aten::_scaled_mm"):
            a, b = args[0].shape, args[1].shape
            return 1, a[0], b[1], a[1]
        if name in ("aten::addmm", "aten::_addmm_activation"):
            a, b = args[1].shape, args[2].shape
            return 1, a[0], b[1], a[1]
        if name in ("aten::bmm", "aten::baddbmm"):
            a, b = (args[0].shape, args[1].shape) if name == "aten::bmm" else (args[1].shape, args[2].shape)
            return a[0], a[1], b[2], a[2]
        if name == "aten::convolution" and not args[6]:  # an implicit GEMM: an output pixel a row
            weight, out, groups = args[1].shape, outputs[0].shape, int(args[8])
            return groups, out[0] * math.prod(out[2:]), weight[0] // groups, math.prod(weight[1:])
        if name == "aten::convolution_backward" and not args[7]:
            # its data and weight gradients: implicit GEMMs of the forward's size each (the same
            # products, taken in another order), as many as its output mask asks for
            weight, out, groups = args[2].shape, args[0].shape, int(args[9])
            passes = sum(_gradients_asked(args))
            if passes:
                return groups * passes, out[0] * math.prod(out[2:]), weight[0] // groups, math.prod(weight[1:])
    except (AttributeError, IndexError, TypeError, ValueError):
        pass
    return None


def _gradients_asked(args: list) -> tuple[bool, bool]:
    """A convolution backward's output mask: whether it computes (the input's, the weight's) gradient."""
    mask = list(args[10]) if len(args) > 10 else [True, True]
    return bool(mask[0]), bool(mask[1])


def _layout_conversions(name: str, args: list, outputs: list) -> tuple[int, int] | None:
    """(elements, kernels) a part's library converts between channels-first and channels-last for a
    16-bit convolution laid out channels-first: cuDNN's tensor-core kernels run channels-last, so
    it transposes each operand in and each result out, a kernel each (a forward: input and weight
    in, output out; a backward's data gradient: output gradient and weight in, input gradient out;
    its weight gradient: input and output gradient in, weight gradient out). A 1x1 convolution
    with unit stride and no padding is a GEMM as it lies and converts nothing; nor does a
    channels-last call. The profile says what an element's conversion costs (0: nothing)."""
    try:
        backward = "backward" in name
        # (y: a forward's output, a backward's output gradient; both have the output's shape)
        y, x, weight = (args[0], args[1], args[2]) if backward else (outputs[0], args[0], args[1])
        stride, padding, groups = (args[4], args[5], args[9]) if backward else (args[3], args[4], args[8])
        if x.dim() < 4 or x.dtype not in (torch.bfloat16, torch.float16):
            return None
        channels_last = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        if x.is_contiguous(memory_format=channels_last) and not x.is_contiguous() \
                or weight.is_contiguous(memory_format=channels_last) and not weight.is_contiguous():
            return None
        if all(k == 1 for k in weight.shape[2:]) and all(int(s) == 1 for s in stride) \
                and all(int(p) == 0 for p in padding) and int(groups) == 1:
            return None
        passes = []  # (each pass's tensors: converted in, converted out)
        if not backward:
            passes.append((x, weight, y))
        else:
            data_gradient, weight_gradient = _gradients_asked(args)
            if data_gradient:
                passes.append((y, weight, x))  # (the input gradient has the input's shape)
            if weight_gradient:
                passes.append((x, y, weight))
        elements = sum(t.numel() for tensors in passes for t in tensors)
        return (elements, 3 * len(passes)) if elements else None
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def _unaligned_channels(name: str, args: list) -> bool:
    """Whether a convolution's input channels (a group's, the weight's second dimension) are not a
    multiple of 8, which the part's tensor-core kernels need (an image's 3 colours: a stem, a patch embedding)."""
    try:
        weight = args[2] if "backward" in name else args[1]
        return int(weight.shape[1]) % 8 != 0
    except (AttributeError, IndexError, TypeError, ValueError):
        return False


def _shapes(value):
    """Tensors as their shapes, through lists and tuples: what flop_counter's formulas take.
    Done here rather than by its wrapper, whose pytree walk makes reference cycles (a closure
    a call): garbage that stays for a program that turns the collector off, as torchtitan
    does between its periodic collections, and a launch's worth each launch."""
    if isinstance(value, torch.Tensor):
        return value.shape
    if isinstance(value, list):
        return [_shapes(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_shapes(v) for v in value)
    return value


def _install_flop_formulas() -> None:
    """The reference path asks torch.utils.flop_counter's formulas for the operators it has one for."""
    global _formulas_installed
    if _formulas_installed:
        return
    from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

    by_name = {packet._qualified_op_name: formula for packet, formula in flop_registry.items()
               if isinstance(packet, torch._ops.OpOverloadPacket)}
    # The device's fused attention runs the CPU's flash kernels (csrc/aten/fused_attention.cpp),
    # which flop_counter does not list: the same count as the other fused attention kernels.
    by_name["aten::_scaled_dot_product_flash_attention_for_cpu"] = (
        lambda query, key, value, *args, out_val=None, **kwargs: sdpa_flop_count(query.shape, key.shape, value.shape))
    by_name["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] = (
        lambda grad_out, query, key, value, *args, out_val=None, **kwargs:
        sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape))

    # addmm with its activation fused (the inference fast path's linear + ReLU/GELU): addmm's GEMM,
    # which flop_counter does not list under this name
    by_name["aten::_addmm_activation"] = (
        lambda bias, a, b, *args, out_val=None, **kwargs: 2 * a.shape[0] * a.shape[1] * b.shape[1])

    def flops(name: str, args: list, kwargs: dict, outputs: list):
        try:
            out = outputs[0] if len(outputs) == 1 else tuple(outputs)
            formula = by_name[name]
            on_shapes = getattr(formula, "__wrapped__", None)  # (flop_counter's shape_wrapper; see _shapes)
            if on_shapes is not None:
                counted = float(on_shapes(*_shapes(args), out_shape=_shapes(out),
                                          **{k: _shapes(v) for k, v in kwargs.items()}))
            else:
                counted = float(formula(*args, **kwargs, out_val=out))
        except Exception:  # noqa: BLE001 - a formula that cannot read this call: priced as vector work
            return None
        shape, attention = _gemm_shape(name, args, outputs), _attention(name, args)
        described = {}
        if shape is not None:
            described["gemm"] = shape
        elif attention is not None:
            backend = _attention_backend(name, args)
            if backend == "math":  # the part runs it unfused: matrix work at the GEMMs' rate
                return counted
            direction, causal, keys, head_dim, queries, heads = attention
            described["attention"] = (direction, causal, keys, kernel_choice.BACKENDS.index(backend), head_dim, queries,
                                      heads)
        if _tf32(name, args):
            described["tf32"] = True
        if "convolution" in name:  # (cuDNN's kernels: the profile's convolution efficiency, not a GEMM's waves)
            described["convolution"] = True
            if "backward" in name:  # (its data and weight gradients: kernels of their own, at their own efficiency)
                described["convolution_backward"] = True
            if _unaligned_channels(name, args):
                described["convolution_unaligned"] = True
            conversions = _layout_conversions(name, args, outputs)
            if conversions is not None:
                described["layout_conversions"] = conversions
        return (counted, described) if described else counted

    _C._simclock_set_flop_formula(flops, sorted(by_name))
    _C._simclock_set_op_classes(kernel_choice.op_classes())
    _formulas_installed = True
