"""Simulated time priced as the part runs it (issue 54): the part's libraries' choices (SDPA's
backend, TF32, memory classes, multi-tensor apply), one compute for a part family, operators
phantom execution used to refuse, and the profile_part pipeline."""
import copy
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_simhpu  # noqa: F401
from torch_simhpu import _C, model_zoo
from torch_simhpu.simulation import part_fit, part_measure
from torch_simhpu.simulation import Launch, ProfileError, load_profile, simulate


def part(name: str) -> dict:
    """A shipped profile with this device's capacity: the suite's earlier tensors live on the
    device, so phantom execution cannot give it the part's."""
    return dict(part_fit._raw(name), memory_capacity=float(_C._memory_limit()))


def device_seconds(fn, profile="h100-sxm") -> float:
    """Simulated device time of fn's kernels (their spans' union), priced under phantom execution."""
    with simulate(part(profile), host_time="modelled", execute=False):
        made = fn()
        torch.simhpu.synchronize()
        mark = _C._simclock_start_log()
        made()
        torch.simhpu.synchronize()
        launches = _C._simclock_stop_log(mark, Launch)
        del made  # (the device takes its capacity back after the block)
    return part_fit._busy([(x.start, x.end) for x in launches if x.work != "marker"])


def sdpa(dtype=torch.bfloat16, head_dim=128, seq=4096):
    def make():
        q, k, v = (torch.empty(2, 16, seq, head_dim, device="simhpu", dtype=dtype) for _ in range(3))
        return lambda: F.scaled_dot_product_attention(q, k, v)
    return make


def test_sdpa_is_priced_by_the_backend_pytorch_would_take_on_the_part():
    profile = load_profile("h100-sxm")
    assert profile["attention"]["priority"][0] == "cudnn"  # (Hopper with a recent cuDNN: PyTorch prefers it)
    default = device_seconds(sdpa())
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        flash = device_seconds(sdpa())
    assert flash > 1.3 * default  # the flash backend, forced, is the slower one (measured 1.5-1.9x at 4k-16k keys)
    # head dim 256 is past cuDNN's limit: flash is what PyTorch takes
    assert device_seconds(sdpa(head_dim=256)) == pytest.approx(_forced_flash(256), rel=1e-6)


def _with_wave_times(forward, backward):
    base = copy.deepcopy(part("h100-sxm"))
    base["attention"]["cudnn"]["forward"]["wave_time"] = forward
    base["attention"]["cudnn"]["backward"]["wave_time"] = backward
    return base


def _attention_call(shape, kv_heads, backward):
    batch, heads, seq, head_dim = shape

    def make():
        q = torch.empty(batch, heads, seq, head_dim, device="simhpu", dtype=torch.bfloat16, requires_grad=backward)
        k, v = (torch.empty(batch, kv_heads, seq, head_dim, device="simhpu", dtype=torch.bfloat16,
                            requires_grad=backward) for _ in range(2))
        call = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=kv_heads != heads)  # noqa: E731
        if not backward:
            return call
        g = torch.ones(batch, heads, seq, head_dim, device="simhpu", dtype=torch.bfloat16)
        return lambda: torch.autograd.grad(call(), (q, k, v), g)
    return make


@pytest.mark.parametrize("shape, kv_heads, waves", [
    ((128, 6, 196, 64), 6, 24),     # a ViT-S's: 768 heads x 4 tiles of 64 = 3072 blocks, 24 waves on 132 units
    ((16, 12, 512, 64), 12, 12),    # a BERT's: 192 x 8 = 1536 blocks, the same FLOPs in half the waves
    ((4, 16, 2048, 128), 4, 16),    # grouped keys: the queries' heads, 64 x 32 = 2048 blocks
])
def test_a_fused_attentions_blocks_pay_a_wave_time_besides_their_flops(shape, kv_heads, waves):
    # (cuDNN's forward on an H100 and an H200: 47 us for a ViT-S's attention, 38 for a BERT's, whose
    # padded tiles are as many: its forward's blocks are query tiles, its backward's key tiles, 64 each here)
    none = _with_wave_times(0.0, 0.0)
    forward = _attention_call(shape, kv_heads, backward=False)
    added = device_seconds(forward, _with_wave_times(1e-6, 0.0)) - device_seconds(forward, none)
    assert added == pytest.approx(waves * 1e-6, rel=0.01)
    both = _attention_call(shape, kv_heads, backward=True)
    added = device_seconds(both, _with_wave_times(0.0, 1e-6)) - device_seconds(both, none)
    assert added == pytest.approx(waves * 1e-6, rel=0.01)
    # a part whose units the profile does not count prices no waves
    unitless = {k: v for k, v in _with_wave_times(1e-6, 1e-6).items() if k != "matrix_units"}
    assert device_seconds(forward, unitless) == pytest.approx(device_seconds(forward, {k: v for k, v in none.items()
                                                                                        if k != "matrix_units"}))


def test_a_wave_time_is_fitted_on_a_steps_attention_kernels_and_its_curves_net_of_it():
    truth = part_fit.check(_with_wave_times(0.7e-6, 2.2e-6))
    cases = [dict(kind="attention", call=call, backend="default", dtype="bfloat16", batch=batch, heads=heads,
                  kv_heads=heads, seq=seq, head_dim=64, causal=False, timing="kernels: the part's own time", seconds=1.0)
             for call in (part_measure.SDPA_F, part_measure.SDPA_FB)
             for batch, heads, seq in ((128, 6, 196), (16, 12, 512), (8, 12, 1024))]
    rows = [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, truth)]
    fitted = _with_wave_times(0.0, 0.0)
    notes = part_fit._fit_wave_times(fitted, rows)
    assert fitted["attention"]["cudnn"]["forward"]["wave_time"] == pytest.approx(0.7e-6, rel=0.02)
    assert fitted["attention"]["cudnn"]["backward"]["wave_time"] == pytest.approx(2.2e-6, rel=0.02)
    assert any("a wave of blocks" in note for note in notes)
    # a step's kernels are all fitted on; rows of one wave count cannot tell the wave's time
    assert part_fit.split(rows)[0] == rows
    alike = _with_wave_times(0.0, 0.0)
    part_fit._fit_wave_times(alike, [r for r in rows if r["seq"] == 196])
    assert alike["attention"]["cudnn"]["forward"]["wave_time"] == 0.0
    with pytest.raises(ProfileError, match=r"attention\.cudnn\.forward\.wave_time"):
        load_profile(_with_wave_times(1.0, 0.0))


def test_grouped_query_attention_is_priced_at_its_grouped_rate_and_the_rate_fitted():
    # (cuDNN's grouped kernels share each key and value tile across the query heads it serves: a
    # [4, 32 heads, 8 key heads, 4096, 128] causal forward ran 1.3x its curve's rate on four machines)
    def profile(grouped):
        made = copy.deepcopy(part("h100-sxm"))
        for direction in ("forward", "backward"):
            made["attention"]["cudnn"][direction].update(wave_time=0.0, grouped_rate=grouped)
        return made
    grouped, plain = _attention_call((2, 16, 1024, 128), 4, backward=False), _attention_call((2, 16, 1024, 128), 16,
                                                                                            backward=False)
    overhead = part("h100-sxm")["kernel_overhead"]
    at_one, at_two = device_seconds(grouped, profile(1.0)), device_seconds(grouped, profile(2.0))
    assert at_two - overhead == pytest.approx((at_one - overhead) / 2, rel=0.01)
    # the simhpu kernel repeats the key heads (its own work, not priced): the operator says the group
    assert device_seconds(plain, profile(2.0)) == pytest.approx(device_seconds(plain, profile(1.0)), rel=1e-9)
    assert at_one == pytest.approx(device_seconds(plain, profile(1.0)), rel=1e-9)
    # the fit finds the rate from grouped rows made by a known one
    truth = part_fit.check(profile(1.3))
    cases = [dict(kind="attention", call=part_measure.SDPA_F, backend="default", dtype="bfloat16", batch=batch,
                  heads=32, kv_heads=8, seq=seq, head_dim=128, causal=True, timing="kernels: the part's own time",
                  seconds=1.0) for batch, seq in ((4, 4096), (4, 2048))]
    rows = [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, truth)]
    fitted = profile(1.0)
    part_fit._fit_grouped_rates(fitted, rows)
    assert fitted["attention"]["cudnn"]["forward"]["grouped_rate"] == pytest.approx(1.3, rel=0.01)
    with pytest.raises(ProfileError, match=r"attention\.cudnn\.forward\.grouped_rate"):
        load_profile(profile(10.0))


def _forced_flash(head_dim):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return device_seconds(sdpa(head_dim=head_dim))


def test_a_float32_matmul_is_priced_in_tf32_only_when_the_program_allows_it():
    def mm():
        a, b = (torch.empty(4096, 4096, device="simhpu") for _ in range(2))
        return lambda: torch.mm(a, b)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        full = device_seconds(mm)
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = device_seconds(mm)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert full > 4 * tf32  # (measured on the H100: 2,677 us against 344 us)


def test_tf32_is_read_as_cublas_reads_it_when_the_program_mixed_the_precision_apis():
    def mm():
        a, b = (torch.empty(4096, 4096, device="simhpu") for _ in range(2))
        return lambda: torch.mm(a, b)
    before, before_precision = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        tf32 = device_seconds(mm)
        # (the generic precision says TF32, cuBLAS's own says IEEE: torch.get_float32_matmul_precision()
        # now raises, a part's matmul runs in full float32)
        torch.backends.cuda.matmul.allow_tf32 = False
        full = device_seconds(mm)
    finally:
        torch.set_float32_matmul_precision(before_precision)
        torch.backends.cuda.matmul.allow_tf32 = before
    assert full > 4 * tf32


def test_a_blocking_copy_into_pageable_host_memory_is_priced_by_the_pageable_link():
    profile = part("h100-sxm")
    priced = part_fit.priced_seconds(dict(kind="host link", call=part_measure.HOST_LINK[3], bytes=1 << 26,
                                          timing="device (CUDA events)"), profile)
    link = profile["host_link"]
    slowest = (1 << 26) / (link["pageable_bandwidth"] * profile["efficiency"]["host_link"])
    assert slowest <= priced < slowest * 1.5 + 1e-4  # (no kernel: the host's wait for the transfer is the time)


def test_an_add_of_two_dtypes_is_priced_as_one_kernel_reading_each_as_given():
    # (a residual stream in float32 plus a bfloat16 branch, as under autocast: the part converts as it reads)
    def add(other_dtype):
        def make():
            x = torch.empty(1 << 24, device="simhpu")
            y = torch.empty(1 << 24, device="simhpu", dtype=other_dtype)
            return lambda: x + y
        return make
    with simulate(part("h100-sxm"), host_time="modelled", execute=False):
        x = torch.empty(1 << 24, device="simhpu")
        y = torch.empty(1 << 24, device="simhpu", dtype=torch.bfloat16)
        torch.simhpu.synchronize()
        mark = _C._simclock_start_log()
        x + y
        torch.simhpu.synchronize()
        launches = [launch for launch in _C._simclock_stop_log(mark, Launch) if launch.work != "marker"]
        del x, y
    assert len(launches) == 1, [launch.op for launch in launches]
    mixed, same = device_seconds(add(torch.bfloat16)), device_seconds(add(torch.float32))
    assert mixed == pytest.approx(same * 10 / 12, rel=0.05)  # (2 + 4 + 4 bytes an element against 4 + 4 + 4)


def test_a_transposing_copy_is_priced_by_the_elements_it_moves_not_their_width():
    def transpose(dtype):
        def make():
            x = torch.empty(128, 384, 196, device="simhpu", dtype=dtype).transpose(1, 2)
            return lambda: x.contiguous()
        return make
    # (on an H100, 8 ps an element in bfloat16 and in float32 alike)
    assert device_seconds(transpose(torch.float32)) == pytest.approx(device_seconds(transpose(torch.bfloat16)), rel=0.02)


def test_an_elementwise_operand_laid_out_across_its_outputs_strides_is_priced_as_reads_that_do_not_coalesce():
    def add(x_layout, y_layout):
        def tensor(layout):
            return (torch.empty(128, 384, 196, device="simhpu").transpose(1, 2) if layout == "transposed"
                    else torch.empty(128, 196, 384, device="simhpu"))

        def make():
            x, y = tensor(x_layout), tensor(y_layout)
            return lambda: x + y
        return make
    alike = device_seconds(add("contiguous", "contiguous"))
    assert device_seconds(add("transposed", "transposed")) == pytest.approx(alike, rel=0.01)
    # (an H100 took 70 us for a transposed float32 [128, 196, 384] plus a contiguous bfloat16 one, 33 us when alike)
    assert device_seconds(add("transposed", "contiguous")) > 1.8 * alike


def _elementwise(call, *shapes, dtype=torch.float32, view=None):
    def make():
        tensors = [torch.empty(shape, device="simhpu", dtype=dtype) for shape in shapes]
        if view is not None:
            tensors = view(*tensors)
        return lambda: call(*tensors)
    return make


def test_an_elementwise_call_whose_operands_do_not_lie_as_its_output_is_priced_by_the_offsets_it_computes():
    # (PyTorch's generic CUDA elementwise kernel computes each operand's offset from the element's
    # index: on an H100 and an H200 alike, a float32 [8192, 2048] times a [8192, 1] took 60 and 55 us,
    # where its bytes alone take 40 and 28)
    offset = 2e-12
    profile = dict(part("h200"), strided_elementwise=offset)
    n, kernel = 8192 * 2048, profile["kernel_overhead"]
    mul = lambda x, y: x * y  # noqa: E731
    broadcast = device_seconds(_elementwise(mul, (8192, 2048), (8192, 1)), profile)
    assert broadcast == pytest.approx(kernel + 3 * n * offset, rel=1e-3)  # (x, y and the output: three offsets)
    assert device_seconds(_elementwise(mul, (8192, 2048), (2048,)), profile) == pytest.approx(broadcast, rel=1e-3)
    # the same elements in bfloat16: the same offsets, though half the bytes
    assert device_seconds(_elementwise(mul, (8192, 2048), (8192, 1), dtype=torch.bfloat16), profile) == \
        pytest.approx(broadcast, rel=1e-3)
    # a Python number is the kernel's argument, no operand: the vectorised kernel's bytes
    alike = device_seconds(_elementwise(mul, (8192, 2048), (8192, 2048)), profile)
    assert device_seconds(_elementwise(lambda x: x * 2.0, (8192, 2048)), profile) < alike < 0.8 * broadcast
    # an in-place operator's tensor is its input and its output: three offsets again
    assert device_seconds(_elementwise(lambda x, y: x.add_(y), (8192, 2048), (8192, 1)), profile) == \
        pytest.approx(broadcast, rel=1e-3)
    # a strided view (a fused projection's chunk), and a mean's backward (its gradient expanded)
    chunk = device_seconds(_elementwise(F.silu, (8192, 4096), view=lambda x: (x.chunk(2, -1)[0],)), profile)
    assert chunk == pytest.approx(kernel + 2 * n * offset, rel=1e-3)
    expanded = device_seconds(_elementwise(lambda x: x / 2048, (8192, 1), view=lambda x: (x.expand(8192, 2048),)),
                              profile)
    assert expanded == pytest.approx(kernel + 2 * n * offset, rel=1e-3)
    # operands that lie alike, though not contiguous (both transposed), take the vectorised kernel
    transposed = device_seconds(_elementwise(mul, (2048, 8192), (2048, 8192), view=lambda x, y: (x.t(), y.t())),
                                profile)
    assert transposed == pytest.approx(alike, rel=1e-3)
    # a part whose profile prices no offsets prices the bytes alone
    assert device_seconds(_elementwise(mul, (8192, 2048), (8192, 1)), dict(profile, strided_elementwise=0.0)) < \
        0.8 * broadcast


def test_the_time_an_operands_offset_takes_is_fitted_on_the_calls_that_compute_them():
    truth = dict(part("h100-sxm"), strided_elementwise=2.5e-12)
    shapes = (([8192, 2048], [8192, 1]), ([4096, 4096], [4096]))
    cases = [dict(kind="memory-bound", call=part_measure.STRIDED_ELEMENTWISE[1], dtype=dtype, shape=shape, other=other,
                  timing="kernels: the part's own time", seconds=1.0)
             for dtype in ("bfloat16", "float32") for shape, other in shapes]
    cases += [dict(kind="memory-bound", call=part_measure.STRIDED_ELEMENTWISE[2], dtype="bfloat16", shape=[8192, 2816],
                   timing="kernels: the part's own time", seconds=1.0)]
    rows = [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, part_fit.check(truth))]
    assert part_fit._offset_seconds(dict(truth, strided_elementwise=0.0), rows) == pytest.approx(2.5e-12, rel=0.01)
    assert part_fit._offset_seconds(truth, []) is None


def _with_norm_steps(forward, backward, traffic=None):
    base = part("h100-sxm")
    classes = dict(base["memory_classes"])
    for cls, step in (("norm", forward), ("norm_backward", backward)):
        classes[cls] = dict(classes.get(cls, {}), row_step=step, **({"traffic": traffic} if traffic else {}))
    return dict(base, memory_classes=classes)


@pytest.mark.parametrize("shape, normalized, weight, forward_rows, backward_rows", [
    ((128, 196, 384), 1, True, 128 * 196, 128 * 196),  # 12 blocks of 32 columns, one wave: the rows in turn
    ((4096, 32768), 1, True, 4096, 4 * 4096),          # 1024 blocks, two a unit on 132 units: four waves
    ((100000, 256), 1, True, 100000, 0),               # many rows, few columns: the rows split over blocks too
    ((64, 16, 24), 2, True, 64, 64),                   # a normalized shape of two dimensions
    ((8192, 768), 1, False, 8192, 0),                  # no weight: no gamma/beta kernel
])
def test_a_layer_norm_pays_a_time_a_row_and_its_backward_walks_its_rows_in_a_chain(
        shape, normalized, weight, forward_rows, backward_rows):
    # (PyTorch's CUDA layer norm runs a block a row: an H100 and an H200 took the same 53 us for a
    # float32 [25088, 384]; its backward's gamma/beta kernel walks the rows, 113 us on both)
    def layer_norm(backward):
        def make():
            x = torch.empty(*shape, device="simhpu", requires_grad=backward)
            w = torch.ones(shape[-normalized:], device="simhpu", requires_grad=backward) if weight else None
            if not backward:
                return lambda: F.layer_norm(x, shape[-normalized:], w)
            y = F.layer_norm(x, shape[-normalized:], w)
            g = torch.ones_like(y)
            return lambda: torch.autograd.grad(y, (x, w) if weight else (x,), g, retain_graph=True)
        return make
    without, forward_step = _with_norm_steps(0.0, 0.0), _with_norm_steps(1e-9, 0.0)
    added = device_seconds(layer_norm(False), forward_step) - device_seconds(layer_norm(False), without)
    assert added == pytest.approx(forward_rows * 1e-9, rel=0.01)
    # (steps long enough that the chain outlasts its kernel's reads at both: each row adds its step)
    once, twice = _with_norm_steps(0.0, 1e-7), _with_norm_steps(0.0, 2e-7)
    added = device_seconds(layer_norm(True), twice) - device_seconds(layer_norm(True), once)
    assert added == pytest.approx(backward_rows * 1e-7, rel=0.01, abs=1e-10)


def test_a_norm_backwards_chain_adds_only_what_its_gamma_beta_kernels_reads_do_not_cover():
    # (the gamma/beta kernel reads the input and the output's gradient again, two of the class's
    # five passes, and walks its rows meanwhile: an H100 and an H200 took 113 us for a float32
    # [25088, 384]'s, whose reads take 25 and 17 us, and 43-46 us for [8192, 768]'s)
    def backward():
        x = torch.empty(25088, 384, device="simhpu", requires_grad=True)
        w = torch.ones(384, device="simhpu", requires_grad=True)
        y = F.layer_norm(x, (384,), w)
        g = torch.ones_like(y)
        return lambda: torch.autograd.grad(y, (x, w), g, retain_graph=True)
    traffic = 2.0
    base = device_seconds(backward, _with_norm_steps(0.0, 0.0, traffic=traffic))
    memory = device_seconds(backward, _with_norm_steps(0.0, 0.0, traffic=2 * traffic)) - base  # (at `traffic`)
    covered = 0.4 * memory / 25088  # (the longest row step the kernel's reads hide)
    hidden = device_seconds(backward, _with_norm_steps(0.0, 0.9 * covered, traffic=traffic))
    assert hidden == pytest.approx(base, rel=1e-9)
    outlasting = device_seconds(backward, _with_norm_steps(0.0, 3 * covered, traffic=traffic))
    assert outlasting - base == pytest.approx(25088 * 3 * covered - 0.4 * memory, rel=0.01)


def test_a_layer_norms_traffic_and_row_step_are_fitted_together():
    # rows made by a profile with a known traffic and time a row: the fit finds both again
    truth = _with_norm_steps(0.6e-9, 2e-9, traffic=1.6)
    cases = [dict(kind="memory-bound", call=call, dtype=dtype, shape=shape,
                  timing="kernels: the part's own time", seconds=1.0)
             for call in part_measure.ROWWISE if call.startswith("F.layer_norm")
             for dtype, shape in (("float32", [25088, 384]), ("float32", [8192, 768]), ("bfloat16", [4096, 8192]))]
    rows = [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, part_fit.check(truth))]
    forward = [r for r in rows if not r["call"].endswith("backward")]
    traffic, row_step = part_fit._traffic_and_row_step(_with_norm_steps(0.0, 2e-9), "norm", forward)
    assert traffic == pytest.approx(1.6, rel=0.05)
    assert row_step == pytest.approx(0.6e-9, rel=0.05)
    assert "norm" in part_fit.ROW_STEP_CLASSES and "norm_backward" in part_fit.ROW_STEP_CLASSES
    # the backward's chain hides under its gamma/beta kernel's reads on the wide bfloat16 rows and
    # outlasts them on the narrow float32 ones: split about its estimate until that settles, the fit
    # finds both again from an estimate far off
    def backward_class(traffic, row_step):
        profile = copy.deepcopy(truth)
        profile["memory_classes"]["norm_backward"].update(traffic=traffic, row_step=row_step)
        return profile
    truth = backward_class(3.0, 4e-9)
    rows = [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, part_fit.check(truth))]
    both = [r for r in rows if r["call"].endswith("backward")]
    traffic, row_step = part_fit._traffic_and_row_step(backward_class(1.0, 1e-9), "norm_backward", both)
    assert traffic == pytest.approx(3.0, rel=0.02)
    assert row_step == pytest.approx(4e-9, rel=0.02)


def test_a_norm_of_a_strided_input_is_priced_with_the_copy_its_part_makes_first():
    def layer_norm(strided):
        def make():
            x = (torch.empty(128, 384, 196, device="simhpu").transpose(1, 2) if strided
                 else torch.empty(128, 196, 384, device="simhpu"))
            return lambda: F.layer_norm(x, (384,))
        return make

    def copy():
        x = torch.empty(128, 384, 196, device="simhpu").transpose(1, 2)
        return lambda: x.contiguous()
    # (PyTorch's CUDA layer norm makes its input contiguous: a ViT's transposed residual stream
    # cost an H100 a 79 us copy kernel before each of its 25 norms, forward and backward)
    assert device_seconds(layer_norm(True)) == pytest.approx(device_seconds(layer_norm(False)) + device_seconds(copy),
                                                             rel=0.02)
    # ... and its host launches that copy, an operator of its own (the part's ViT step ran 50 such
    # copy kernels more than its BERT step, whose blocks are the same)
    profile = part("h100-sxm")
    _, contiguous_host = _launches(layer_norm(False), profile)
    _, strided_host = _launches(layer_norm(True), profile)
    assert strided_host - contiguous_host == pytest.approx(profile["host_op_overhead"] + profile["host_launch_overhead"],
                                                           rel=0.02)


def test_a_reduction_reads_its_input_once():
    def sum_():
        x = torch.empty(1 << 26, device="simhpu")
        return lambda: x.sum()

    def clone():
        x = torch.empty(1 << 26, device="simhpu")
        return lambda: x.clone()
    # a clone reads and writes the bytes; a sum reads them and writes a scalar
    assert device_seconds(sum_) < 0.7 * device_seconds(clone)


def test_a_copy_of_a_slice_reads_along_its_rows_not_across_strides():
    # (a slice is not contiguous, yet its rows lie as the copy's output's do: a plain copy's pass,
    # where a transposed view's copy reads across strides)
    def copy(view):
        def make():
            x = torch.empty(4096, 8192, device="simhpu", dtype=torch.bfloat16)
            return lambda: view(x).contiguous()
        return make
    sliced = device_seconds(copy(lambda x: x[:, :4096]))
    assert sliced == pytest.approx(device_seconds(copy(lambda x: x[:, :4096].clone())), rel=0.05)
    assert device_seconds(copy(lambda x: x[:, :4096].t())) > 2 * sliced


def test_a_transposing_copy_costs_more_than_a_straight_one():
    def copy(transposed):
        def make():
            x = torch.empty(4096, 4096, device="simhpu", dtype=torch.bfloat16)
            return (lambda: x.t().contiguous()) if transposed else (lambda: x.clone())
        return make
    assert device_seconds(copy(True)) > 2 * device_seconds(copy(False))


def test_multi_tensor_apply_launches_as_cuda_chunks_it():
    profile = load_profile("h100-sxm")
    shapes = part_measure.adamw_shapes(148, 768)
    numels = [math.prod(s) for s in shapes]
    # fused AdamW over GPT-2's 148 tensors: 7 kernels on a real H100 and H200 (torch.profiler,
    # benchmarks/measurements/); four lists (params, grads, exp_avg, exp_avg_sq)
    assert _C._simclock_multi_tensor_kernels(numels, 4, profile) == 7
    # a launch is full at 320 chunks of 65,536 elements, or at the most tensors for the depth
    assert _C._simclock_multi_tensor_kernels([65536 * 320], 1, profile) == 1
    assert _C._simclock_multi_tensor_kernels([65536 * 321], 1, profile) == 2
    assert _C._simclock_multi_tensor_kernels([1] * 110, 1, profile) == 1
    assert _C._simclock_multi_tensor_kernels([1] * 111, 1, profile) == 2
    assert _C._simclock_multi_tensor_kernels([1] * 111, 2, profile) == 2  # (64 tensors a launch at depth 2)


def test_a_foreach_step_is_priced_as_few_kernels_not_one_a_tensor():
    def step(foreach):
        def make():
            params = [torch.empty(64, 64, device="simhpu").requires_grad_() for _ in range(64)]
            for p in params:
                p.grad = torch.empty_like(p)
            optimizer = torch.optim.AdamW(params, foreach=foreach)
            optimizer.step()
            return optimizer.step
        return make
    for_loop, foreach = device_seconds(step(False)), device_seconds(step(True))
    assert foreach < for_loop / 3  # small tensors: kernels' fixed time dominates, and foreach has few kernels


_COMPUTE = ("matrix_flops", "vector_flops", "tf32_flops", "matrix_units", "attention", "memory_classes",
            "multi_tensor_apply", "softmax_rows", "strided_elementwise", "convolution_layout_conversion", "die")


def test_one_part_family_one_compute():
    h100, h200, hbm2e = (load_profile(n) for n in ("h100-sxm", "h200", "h100-hbm2e-96gb"))
    for member in (h200, hbm2e):  # the same die: every compute figure the SXM's, as calibrated on it
        for field in _COMPUTE:
            assert member[field] == h100[field], (member["name"], field)
        assert member["efficiency"] == h100["efficiency"] and member["kernel_overhead"] == h100["kernel_overhead"]
    # what the datasheets say differs: memory
    assert h200["memory_bandwidth"] == 4.8e12 and h100["memory_bandwidth"] == 3.35e12
    assert hbm2e["memory_bandwidth"] == 2.4e12
    assert h200["memory_capacity"] > hbm2e["memory_capacity"] > h100["memory_capacity"]
    # compute-bound work is priced alike on both parts; memory-bound work follows the bandwidth
    assert device_seconds(sdpa(), "h200") == pytest.approx(device_seconds(sdpa(), "h100-sxm"), rel=0.02)

    def add():
        x = torch.empty(1 << 26, device="simhpu")
        return lambda: x + x
    assert device_seconds(add, "h100-sxm") / device_seconds(add, "h200") == pytest.approx(4.8 / 3.35, rel=0.05)


def test_a_part_with_fewer_sms_and_a_lower_clock_gets_its_siblings_compute_scaled():
    sxm, pcie = load_profile("h100-sxm"), load_profile("h100-pcie")
    scale = 114 * 1.755e9 / (132 * 1.98e9)
    cycle = 1.98e9 / 1.755e9
    # the scaled calibration agrees with the PCIe datasheet's own rates (756 bf16, 51 fp32, 26 fp64 TFLOP/s)
    for dtype, datasheet in ((torch.bfloat16, 756e12), (torch.float32, 51e12)):
        assert pcie["matrix_flops"][dtype] == pytest.approx(sxm["matrix_flops"][dtype] * scale)
        assert pcie["matrix_flops" if dtype == torch.bfloat16 else "vector_flops"][dtype] == pytest.approx(datasheet, rel=0.01)
    assert pcie["vector_flops"][torch.float64] == pytest.approx(26e12, rel=0.01)
    assert pcie["matrix_units"]["count"] == 114 and pcie["die"] == {"sms": 114, "boost_clock": 1.755e9}
    assert pcie["matrix_units"]["tile_overhead"] == pytest.approx(sxm["matrix_units"]["tile_overhead"] * cycle)
    for direction in ("forward", "backward"):
        ours, theirs = pcie["attention"]["cudnn"][direction], sxm["attention"]["cudnn"][direction]
        assert ours["flops"] == pytest.approx([r * scale for r in theirs["flops"]])
        assert ours["wave_time"] == pytest.approx(theirs["wave_time"] * cycle)
        assert ours["tile"] == theirs["tile"] and ours["grouped_rate"] == theirs["grouped_rate"]
    for name, cost in sxm["memory_classes"].items():  # passes over memory stay, the units' rate and row steps scale
        mine = pcie["memory_classes"][name]
        assert (mine["traffic"], mine["floor"]) == (cost["traffic"], cost["floor"]), name
        assert (mine["rate"], mine["row_step"]) == pytest.approx((cost["rate"] * scale, cost["row_step"] * cycle)), name
    assert pcie["strided_elementwise"] == pytest.approx(sxm["strided_elementwise"] / scale)
    assert pcie["efficiency"] == sxm["efficiency"] and pcie["host_autograd_overhead"] == sxm["host_autograd_overhead"]
    assert pcie["memory_bandwidth"] == 2.0e12 and pcie["fabric"]["intra_node"]["bandwidth"] == 64e9
    # priced: attention takes the compute's ratio longer, a large add the memory's
    assert device_seconds(sdpa(), "h100-pcie") / device_seconds(sdpa(), "h100-sxm") == pytest.approx(1 / scale, rel=0.05)

    def add():
        x = torch.empty(1 << 26, device="simhpu")
        return lambda: x + x
    assert device_seconds(add, "h100-pcie") / device_seconds(add, "h100-sxm") == pytest.approx(3.35 / 2.0, rel=0.05)


def test_a_die_a_profile_states_wrongly_is_refused_by_name(tmp_path):
    faster = tmp_path / "faster.json"
    faster.write_text(json.dumps({"inherits": "h100-sxm", "die": {"sms": 132, "boost_clock": 2.2e9}}))
    assert load_profile(str(faster))["matrix_flops"][torch.bfloat16] == pytest.approx(
        load_profile("h100-sxm")["matrix_flops"][torch.bfloat16] * 2.2 / 1.98)
    for die, message in (({"sms": 0, "boost_clock": 1.9e9}, "'die.sms'"), ({"sms": 100, "boost_clock": 1.9}, "'die.boost_clock'"),
                         ({"sms": 100}, "'die.boost_clock'"), ({"cores": 100}, "'die'")):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"inherits": "h100-sxm", "die": die}))
        with pytest.raises(ProfileError, match=rf"bad\.json: field {message}"):
            load_profile(str(bad))
    # a die that disagrees with the matrix units it states
    with pytest.raises(ProfileError, match=r"matrix_units\.count.*die\.sms = 100"):
        load_profile(dict(part_fit._raw("h100-sxm"), die={"sms": 100, "boost_clock": 1.98e9}))


def test_a_profile_that_inherits_states_only_what_differs(tmp_path):
    own = tmp_path / "part.json"
    own.write_text(json.dumps({"name": "mine", "inherits": "h100-sxm", "memory_bandwidth": 2e12}))
    mine = load_profile(str(own))
    assert mine["memory_bandwidth"] == 2e12 and mine["matrix_units"] == load_profile("h100-sxm")["matrix_units"]
    loop = tmp_path / "loop.json"
    loop.write_text(json.dumps({"inherits": "loop.json"}))
    with pytest.raises(ProfileError, match="cycle"):
        load_profile(str(loop))
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"inherits": "no-such-part"}))
    with pytest.raises(ProfileError, match="inherits.*no profile 'no-such-part'"):
        load_profile(str(missing))


@pytest.mark.parametrize("field,value,message", [
    ("memory_classes", {"softmax": {"traffic": 1000}}, "memory_classes.softmax.traffic"),
    ("attention", {"rules": "tpu"}, "attention.rules"),
    ("synchronous_launches", "yes", "synchronous_launches"),
    ("memory_classes", {"nonsense": {}}, "memory_classes.nonsense"),
    ("attention", {"priority": ["cudnn", "cudnn"]}, "attention.priority"),
    ("multi_tensor_apply", {"chunk": 0}, "multi_tensor_apply.chunk"),
    ("softmax_rows", {"register_elements": 0}, "softmax_rows.register_elements"),
    ("softmax_rows", {"warp_rows": 2048}, "softmax_rows.warp_rows"),
    ("softmax_rows", "cuda", "softmax_rows"),
    ("memory_classes", {"softmax": {"rate": 5.0}}, "memory_classes.softmax.rate"),
    ("attention", {"cudnn": {"forward": {"sequence": [512], "flops": [1e14], "tile": [64]}}},
     "attention.cudnn.forward.tile"),
    ("attention", {"cudnn": {"forward": {"sequence": [512], "flops": [1e14], "head_dim_exponent": 0.3}}},
     "attention.cudnn.forward.head_dim_exponent"),
    ("attention", {"cudnn": {"forward": {"sequence": [512], "flops": [1e14], "head_dim": 128,
                                         "head_dim_exponent": 3}}}, "attention.cudnn.forward.head_dim_exponent"),
    ("attention", {"cudnn": {"forward": {"sequence": [512], "flops": [1e14], "head_dim": 0}}},
     "attention.cudnn.forward.head_dim"),
    ("attention", {"cudnn": {"forward": {"sequence": [512], "flops": [1e14], "tiles": [64, 128]}}},
     "attention.cudnn.forward.tiles"),
])
def test_a_profile_field_out_of_range_is_refused_by_name(field, value, message):
    profile = dict(part_fit._raw("h100-sxm"), **{field: value})
    with pytest.raises(ProfileError, match=message.replace(".", r"\.")):
        load_profile(profile)


@pytest.mark.parametrize("make", [
    lambda: (lambda x, w: lambda: F.layer_norm(x, (64,), w))(
        torch.empty(8, 64, device="simhpu", dtype=torch.bfloat16), torch.empty(64, device="simhpu", dtype=torch.bfloat16)),
    lambda: (lambda x, bn: lambda: bn(x))(
        torch.empty(8, 4, 6, 6, device="simhpu", dtype=torch.bfloat16),
        torch.nn.BatchNorm2d(4).to("simhpu", torch.bfloat16)),
])
def test_phantom_execution_prices_norms_in_reduced_precision(make):
    # (they took the synchronised route, refused under phantom execution: its outputs are the CPU kernel's)
    assert device_seconds(make) > 0


@pytest.mark.parametrize("name", model_zoo.MODELS)
def test_every_operator_of_the_model_zoo_steps_is_priceable(name):
    with simulate(part("h100-sxm"), host_time="modelled", execute=False, values="error") as sim:
        step = model_zoo.training_step(name, "simhpu", scale="cpu")
        step()
        step()
        del step
    assert sim.kernels() and not sim.host_reads


def test_part_fit_holds_rows_apart_and_the_fit_moves_toward_them():
    rows = [dict(kind="memory-bound", call="x + y", dtype="float32", numel=n, seconds=n * 12 / 1.5e12,
                 timing="device (CUDA events)") for n in (1 << 24, 1 << 25, 1 << 26, 1 << 27)]
    fit_rows, held = part_fit.split(rows)
    assert not {id(r) for r in fit_rows} & {id(r) for r in held} and len(fit_rows) + len(held) == 4
    profile, notes = part_fit.fit(fit_rows, part("h100-sxm"), log=lambda *_: None)
    results = part_fit.evaluate(held, load_profile(profile))
    assert all(abs(r["error"]) < 0.05 for r in results)  # a 1.5 TB/s part, predicted on rows it did not see
    assert any("memory efficiency" in n for n in notes)


def test_profile_part_on_the_cpu_writes_a_profile_that_loads(tmp_path):
    output = tmp_path / "host.json"
    result = subprocess.run([sys.executable, "-m", "torch_simhpu.profile_part", "--device", "cpu", "-o", str(output),
                             "--time-limit", "240"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    profile = load_profile(str(output))
    assert profile["name"] == "host" and any("held out" in s for s in json.loads(output.read_text())["sources"])


def test_profile_part_refuses_a_device_torch_does_not_have_and_writes_nothing(tmp_path):
    output = tmp_path / "x.json"
    result = subprocess.run([sys.executable, "-m", "torch_simhpu.profile_part", "--device", "nosuchdevice", "-o",
                             str(output)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "nosuchdevice" in result.stderr and not output.exists()


def test_a_measured_step_keeps_the_least_and_the_most_of_its_ten_beside_their_median():
    measured = part_measure.measure("cpu", [], time_limit=60.0, log=lambda *_: None, steps=["gpt"], zoo_scale="cpu")
    row, = measured["rows"]
    assert row["seconds_least"] <= row["seconds"] <= row["seconds_most"]
    assert "seconds_least" not in part_measure.describe(row)


def test_a_cpu_call_is_timed_on_operands_that_have_left_the_cache(monkeypatch):
    """A call timed again and again on the same tensors reads them from the CPU's cache; in a step, other
    operators' data passed through it since. So the CPU's rows rotate each call's operands through copies
    that together pass twice its last-level cache, and say so; a launch row, whose one-element tensors are
    the host's data, is not rotated."""
    monkeypatch.setattr(part_measure, "last_level_cache_bytes", lambda: 4 << 20)
    gemm = dict(kind="gemm", call=part_measure.GEMM, dtype="float32", m=256, n=256, k=256)
    plain = part_measure.build(gemm, "cpu")
    assert torch.equal(plain(), plain())
    held = part_measure.bytes_held(plain)
    assert held == 2 * 256 * 256 * 4
    cold = part_measure.build_cold(gemm, "cpu")
    copies = math.ceil(2 * (4 << 20) / held)
    results = [cold() for _ in range(copies + 1)]
    assert not torch.equal(results[0], results[1])  # (each call another copy's operands...)
    assert torch.equal(results[0], results[copies])  # (...until every copy has had its turn)
    adamw = dict(kind="optimizer", call=part_measure.ADAMW[0], tensors=4, width=16)
    stepped = part_measure.build(adamw, "cpu")
    stepped()  # (its moments made)
    # (parameters, gradients, two moments, and each tensor's step count, a float32 scalar)
    assert part_measure.bytes_held(stepped) == 4 * 4 * adamw["numel"] + 4 * adamw["tensors"]
    launch = dict(kind="launch", call=part_measure.LAUNCH_HOST)
    assert part_measure.build_cold(launch, "cpu")().item() == 1.0
    row, = part_measure.measure("cpu", [gemm, launch], time_limit=60.0, log=lambda *_: None)["rows"][:1]
    assert f"rotated through {copies} copies" in row["timing"]
    # (a call that holds no tensors of its own has nothing to rotate)
    def holds_nothing():
        return None
    monkeypatch.setattr(part_measure, "build", lambda case, device: holds_nothing)
    assert part_measure.build_cold(gemm, "cpu") is holds_nothing


def test_profile_part_names_a_measurement_that_runs_past_its_time(tmp_path):
    with pytest.raises(TimeoutError, match="ran past 0 s at torch.mm"):
        part_measure.measure("cpu", part_measure.cpu_cases(), time_limit=0.0, log=lambda *_: None)


def test_profile_part_names_a_measurement_that_fails_and_writes_nothing(tmp_path, monkeypatch):
    from torch_simhpu.simulation import profile_part
    bad = dict(kind="gemm", call=part_measure.GEMM, dtype="float32", m=-1, n=4, k=4)
    monkeypatch.setattr(part_measure, "cpu_cases", lambda: [bad])
    output = tmp_path / "part.json"
    with pytest.raises(RuntimeError, match=r"failed on cpu, the first: torch\.mm\(a, b\) \(dtype=float32, m=-1"):
        profile_part.profile_part("cpu", str(output), log=lambda *_: None)
    assert not output.exists()


def test_a_phantom_block_gives_the_device_its_capacity_back():
    before = _C._memory_limit()
    if not (_C._set_device_capacity(before + 2**20) and _C._set_device_capacity(before)):
        pytest.skip("tensors of earlier tests live on the device: its capacity cannot change in this process")
    with simulate("h100-sxm", host_time="modelled", execute=False):
        x = torch.empty(1024, device="simhpu")
        assert _C._memory_limit() == int(load_profile("h100-sxm")["memory_capacity"])
        del x
    assert _C._memory_limit() == before


# -- a part that is its own host (the CPU), and the host time a library's Python takes --------

def _launches(fn, profile):
    with simulate(profile, execute=False):
        made = fn()
        torch.simhpu.synchronize()
        mark = _C._simclock_start_log()
        t0 = _C._simclock_host_now()
        made()
        host = _C._simclock_host_now() - t0
        torch.simhpu.synchronize()
        launches = _C._simclock_stop_log(mark, Launch)
        del made
    return [x for x in launches if x.work != "marker"], host


def _two_matmuls():
    a = torch.empty(1024, 1024, device="simhpu")
    return lambda: (a @ a, a @ a)


def test_a_part_with_synchronous_launches_runs_each_kernel_before_the_host_goes_on():
    (first, second), _ = _launches(_two_matmuls, part("cpu-host"))  # the CPU: its own host
    assert second.launched >= first.end  # launched once the first kernel ended
    (first, second), _ = _launches(_two_matmuls, part("h100-sxm"))  # a GPU: the host runs ahead
    assert second.launched < first.end


def test_a_part_without_multi_tensor_apply_runs_foreach_ops_a_kernel_a_tensor():
    def make():
        xs = [torch.empty(4096, device="simhpu") for _ in range(12)]
        return lambda: torch._foreach_add_(xs, 1.0)
    looped, _ = _launches(make, part("cpu-host"))  # multi_tensor_apply: false
    assert len(looped) == 12 and all(x.end > x.start for x in looped)
    chunked, _ = _launches(make, part("h100-sxm"))
    assert sum(x.duration for x in chunked) < sum(x.duration for x in looped)


def test_gelu_is_priced_by_the_special_class_not_as_an_exp():
    profile = dict(part("h100-sxm"), memory_classes={"transcendental": {"traffic": 1.0}, "special": {"traffic": 4.0}})

    def unary(op):
        def make():
            x = torch.empty(1 << 26, device="simhpu")
            return lambda: op(x)
        return make
    assert device_seconds(unary(F.gelu), profile) == pytest.approx(4 * device_seconds(unary(torch.exp), profile), rel=0.05)


def test_an_optimizer_step_takes_the_profiles_host_time_a_tensor():
    def make():
        params = [torch.empty(8, device="simhpu").requires_grad_() for _ in range(10)]
        for p in params:
            p.grad = torch.empty_like(p)
        optimizer = torch.optim.AdamW(params, foreach=True)
        optimizer.step()
        return optimizer.step
    _, plain = _launches(make, part("h100-sxm"))
    _, with_python = _launches(make, dict(part("h100-sxm"), host_optimizer_overhead=50e-6))
    assert with_python - plain == pytest.approx(10 * 50e-6, rel=1e-6)


def test_a_convolution_takes_at_least_the_profiles_floor():
    def make():
        x, w = torch.empty(1, 4, 8, 8, device="simhpu"), torch.empty(4, 4, 3, 3, device="simhpu")
        return lambda: F.conv2d(x, w, padding=1)
    assert device_seconds(make, dict(part("h100-sxm"), convolution_floor=300e-6)) == pytest.approx(300e-6, rel=1e-6)
    assert device_seconds(make) < 100e-6


def test_the_cpu_as_a_part_benchmark_runs_end_to_end(tmp_path):
    """benchmarks/cpu_as_a_part.py: this CPU profiled, a zoo step timed and priced on the profile
    (the suite checks the pipeline, not the figure: docs/figures.md has the full run's)."""
    import os
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "cpu_as_a_part.py")
    result = subprocess.run([sys.executable, bench, "--quick", "--keep", str(tmp_path)], capture_output=True,
                            text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "gpt      measured" in result.stdout and "steps: median |error|" in result.stdout
    profile = load_profile(str(tmp_path / "cpu-part.json"))
    assert profile["synchronous_launches"] and profile["multi_tensor_apply"]["enabled"] is False
    assert profile["host_python_line"] > 0  # (fitted on profile_part's Python row)
    rows = json.loads((tmp_path / "cpu-rows.json").read_text())["rows"]
    assert any(r["kind"] == "step" and r["model"] == "gpt" and r["autocast"] is False for r in rows)


def test_an_autograd_node_takes_the_profiles_host_time():
    def make():
        x = torch.ones((), device="simhpu", requires_grad=True)

        def forward_backward():
            y = x
            for _ in range(8):
                y = y * 1.0001
            y.backward()
        return forward_backward
    _, plain = _launches(make, dict(part("h100-sxm"), host_autograd_overhead=0.0))
    _, with_engine = _launches(make, dict(part("h100-sxm"), host_autograd_overhead=20e-6))
    # eight MulBackward0 nodes and the leaf's AccumulateGrad
    assert with_engine - plain == pytest.approx(9 * 20e-6, rel=1e-6)


@pytest.mark.parametrize("kv_heads", [16, 4])
def test_fused_attention_is_priced_as_the_parts_kernels_alone(kv_heads):
    """The CPU kernel that stands in for the part's needs its gradients copied back into the
    operator's layout (and, for grouped-query attention, its key and value heads repeated and their
    gradients summed): simhpu's own work, which the part's fused kernels do in place."""
    def make():
        q = torch.empty(2, 16, 512, 64, device="simhpu", dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.empty(2, kv_heads, 512, 64, device="simhpu", dtype=torch.bfloat16, requires_grad=True)
                for _ in range(2))
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=kv_heads != 16)
        g = torch.empty_like(out)
        return lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, enable_gqa=kv_heads != 16),
                                           (q, k, v), g)
    launches, _ = _launches(make, part("h100-sxm"))
    assert [x.op for x in launches] == ["aten::_scaled_dot_product_flash_attention_for_cpu",
                                        "aten::_scaled_dot_product_flash_attention_for_cpu_backward"]


def _cudnn_curves(**shape) -> dict:
    """h100-sxm with its cuDNN attention curves flat (one rate at every length) and `shape` added to both."""
    base = part("h100-sxm")
    attention = json.loads(json.dumps(base["attention"]))
    for direction in ("forward", "backward"):
        attention["cudnn"][direction] = dict({"sequence": [512], "flops": [4e14]}, **shape)
    return dict(base, attention=attention)


def _sdpa_forward(seq, head_dim=128, heads=16):
    def make():
        q, k, v = (torch.empty(8, heads, seq, head_dim, device="simhpu", dtype=torch.bfloat16) for _ in range(3))
        return lambda: F.scaled_dot_product_attention(q, k, v)
    return make


def test_an_attention_kernel_costs_the_whole_tiles_its_sequence_needs():
    # (cuDNN's forward computes blocks of 64 queries by 128 keys: 1,000 keys cost what 1,024 do; the
    # sequences here are long enough that the kernel is bound by its arithmetic, not its memory)
    plain, tiled = _cudnn_curves(), _cudnn_curves(tile=[64, 128])
    assert device_seconds(_sdpa_forward(1000), plain) == pytest.approx(
        device_seconds(_sdpa_forward(1024), plain) * (1000 / 1024) ** 2, rel=0.02)
    assert device_seconds(_sdpa_forward(1000), tiled) == pytest.approx(device_seconds(_sdpa_forward(1024), tiled),
                                                                       rel=0.02)
    assert device_seconds(_sdpa_forward(1024), tiled) == pytest.approx(device_seconds(_sdpa_forward(1024), plain),
                                                                       rel=1e-6)


def test_an_attention_rate_scales_with_the_head_dim_by_the_profiles_exponent():
    # (at head dim 64 the part's fused attention attains 0.83-0.9 of its rate at 128, measured at 2k-8k keys)
    plain, scaled = _cudnn_curves(head_dim=128), _cudnn_curves(head_dim=128, head_dim_exponent=0.5)
    assert device_seconds(_sdpa_forward(2048, head_dim=64, heads=32), scaled) == pytest.approx(
        device_seconds(_sdpa_forward(2048, head_dim=64, heads=32), plain) * 2 ** 0.5, rel=0.02)
    assert device_seconds(_sdpa_forward(2048), scaled) == pytest.approx(device_seconds(_sdpa_forward(2048), plain),
                                                                        rel=1e-6)


def test_the_fit_reads_attention_tiles_from_the_kernels_names_and_the_head_dim_exponent_from_other_head_dims():
    truth = _cudnn_curves(head_dim=128, head_dim_exponent=0.4)
    names = {"forward": "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0",
             "backward": "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_kernel0_0"}
    cases = []
    for seq, head_dim, heads in ((512, 128, 16), (2048, 128, 16), (2048, 64, 32), (8192, 64, 32)):
        for call in (part_measure.SDPA_F, part_measure.SDPA_FB):
            kernels = {names["forward"]: 1, **({names["backward"]: 1} if call == part_measure.SDPA_FB else {})}
            cases.append(dict(kind="attention", call=call, backend="default", dtype="bfloat16", batch=16384 // seq,
                              heads=heads, kv_heads=heads, seq=seq, head_dim=head_dim, causal=False, kernels=kernels,
                              timing="device (CUDA graph of 20 calls, median of 5 replays)", seconds=1.0))
    rows = [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, part_fit.check(truth))]
    fitted, notes = dict(part("h100-sxm")), []
    part_fit._fit_attention(fitted, [(row, part_fit.normalised(row)) for row in rows], notes)
    cudnn = fitted["attention"]["cudnn"]
    assert cudnn["forward"]["tile"] == [64, 128] and cudnn["backward"]["tile"] == [64, 64]
    assert cudnn["forward"]["head_dim"] == 128
    assert cudnn["forward"]["head_dim_exponent"] == pytest.approx(0.4, abs=0.02)
    load_profile(fitted)


def test_a_rows_own_backend_is_kept_when_it_is_normalised():
    row = dict(kind="attention", call=part_measure.SDPA_F, backend="flash", dtype="bfloat16", batch=1, heads=16,
               kv_heads=16, seq=512, head_dim=128, causal=False, seconds=1e-4)
    assert part_fit.normalised(row)["backend"] == "flash"
    shared = dict(row, call="scaled_dot_product_attention, flash backend forced (sdpa_kernel(FLASH_ATTENTION)), forward")
    del shared["backend"]
    assert part_fit.normalised(shared)["backend"] == "flash"
    assert part_fit.normalised(dict(shared, call="scaled_dot_product_attention (default backend), forward"))["backend"] == "default"


def test_an_attention_backward_timed_within_noise_of_its_forward_still_fits_a_positive_rate():
    """A busy host can time forward + backward no longer than the forward alone; the difference is
    then noise, and the fit must not turn it into a negative (or unbounded) backward rate."""
    shape = dict(kind="attention", backend="flash", dtype="float32", batch=2, heads=4, kv_heads=4, seq=256,
                 head_dim=32, causal=False)
    rows = [dict(shape, call=part_measure.SDPA_F, seconds=1.0e-3), dict(shape, call=part_measure.SDPA_FB, seconds=0.9e-3)]
    profile, notes = dict(part_fit._raw("cpu-host")), []
    part_fit._fit_attention(profile, [(row, part_fit.normalised(row)) for row in rows], notes)
    backward = profile["attention"]["flash"]["backward"]["flops"]
    assert len(backward) == 1 and 0 < backward[0] < math.inf
    assert any("within noise" in note for note in notes)
    load_profile(dict(profile, memory_capacity=1e9))


def test_a_convolutions_backward_is_priced_at_its_own_efficiency():
    def make():
        x = torch.empty(32, 64, 56, 56, device="simhpu", dtype=torch.bfloat16, requires_grad=True)
        w = torch.empty(64, 64, 3, 3, device="simhpu", dtype=torch.bfloat16, requires_grad=True)
        out = F.conv2d(x, w, padding=1)
        g = torch.empty_like(out)
        return lambda: torch.autograd.grad(F.conv2d(x, w, padding=1), (x, w), g)

    def seconds(**efficiency):
        profile = dict(part("h100-sxm"), convolution_layout_conversion=0.0)  # (conversions move no faster)
        profile = dict(profile, efficiency=dict(profile["efficiency"], convolution=0.5, **efficiency))
        launches, _ = _launches(make, profile)
        (forward,) = [x for x in launches if x.op == "aten::convolution"]
        (backward,) = [x for x in launches if x.op.startswith("aten::convolution_backward")]
        return forward.duration, backward.duration
    forward, same = seconds(convolution_backward=0)  # (none of its own: the convolution's)
    unchanged, slow = seconds(convolution_backward=0.1)
    assert unchanged == pytest.approx(forward, rel=1e-9)
    assert slow > 3 * same


def test_profile_part_refuses_a_thread_count_below_one_and_writes_nothing(tmp_path):
    output = tmp_path / "host.json"
    result = subprocess.run([sys.executable, "-m", "torch_simhpu.profile_part", "--device", "cpu", "--threads", "0",
                             "-o", str(output)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "--threads must be >= 1, got 0" in result.stderr and not output.exists()


def _image(shape, grad=False):
    return torch.empty(*shape, device="simhpu", dtype=torch.bfloat16, requires_grad=grad)


@pytest.mark.parametrize("op, cls", [
    (lambda x: F.batch_norm(x, None, None, training=True), "batch_norm"),
    (lambda x: F.max_pool2d(x, 3, 2, 1), "pooling"),
    (lambda x: F.layer_norm(x, x.shape[-1:]), "norm"),
])
def test_batch_norm_and_pooling_are_priced_by_classes_of_their_own(op, cls):
    # (the part's batch-norm kernels reduce a channel a block, its pooling reads overlapping windows:
    # each its own class, so a row-wise norm's traffic does not price them)
    def make():
        x = _image((32, 64, 56, 56))
        return lambda: op(x)
    classes = ("norm", "batch_norm", "pooling")
    base = part("h100-sxm")
    plain = dict(base, memory_classes={c: {"traffic": 1.0} for c in classes})
    heavier = dict(base, memory_classes={c: {"traffic": 8.0 if c == cls else 1.0} for c in classes})
    assert device_seconds(make, heavier) > 4 * device_seconds(make, plain)


def test_a_concatenation_is_priced_by_a_class_of_its_own_and_a_plain_copy_not_by_its_traffic():
    # (cat's batched copy kernel got through its bytes 1.4x slower than a clone on every part timed:
    # one copy class priced clones 7-19 % slow and cats 12-24 % fast)
    def call(fn):
        def make():
            x = _image((8192, 4096))
            return lambda: fn(x)
        return make
    cat, clone = call(lambda x: torch.cat((x, x), -1)), call(lambda x: x.clone())
    base = part("h100-sxm")
    plain = dict(base, memory_classes={"copy": {"traffic": 1.0}, "concatenation": {"traffic": 1.0}})
    heavier = dict(base, memory_classes={"copy": {"traffic": 1.0}, "concatenation": {"traffic": 2.0}})
    assert device_seconds(cat, heavier) > 1.8 * device_seconds(cat, plain)
    assert device_seconds(clone, heavier) == pytest.approx(device_seconds(clone, plain), rel=1e-9)
    # a profile written before the class was told apart prices a concatenation as a copy
    kin = dict(base, memory_classes={"copy": {"traffic": 2.0}})
    assert load_profile(kin)["memory_classes"]["concatenation"]["traffic"] == 2.0


def test_a_channels_first_batch_norm_walks_a_channel_a_block_and_a_channels_last_one_takes_its_own_class():
    def batch_norm(shape, memory_format=torch.contiguous_format):
        def make():
            x = _image(shape).contiguous(memory_format=memory_format)
            return lambda: F.batch_norm(x, None, None, training=True)
        return make
    base = part("h100-sxm")
    plain = {"batch_norm": {"traffic": 1.0}, "batch_norm_channels_last": {"traffic": 1.0}}
    chained = dict(base, memory_classes=dict(plain, batch_norm={"traffic": 1.0, "row_step": 1e-9}))
    unchained = dict(base, memory_classes=plain)
    # 64 channels fill half the H100's 132 units once; 512 take four waves of a fourth of the elements each
    for shape, walked in (((32, 64, 56, 56), 32 * 56 * 56), ((32, 512, 28, 28), 4 * 32 * 28 * 28)):
        added = device_seconds(batch_norm(shape), chained) - device_seconds(batch_norm(shape), unchained)
        assert added == pytest.approx(walked * 1e-9, rel=0.01)
    # channels last: PyTorch's other kernels reduce across blocks, no chain, a traffic of their own
    last = batch_norm((32, 64, 56, 56), torch.channels_last)
    assert device_seconds(last, chained) == pytest.approx(device_seconds(last, unchained), rel=1e-9)
    heavier = dict(base, memory_classes=dict(plain, batch_norm_channels_last={"traffic": 8.0}))
    assert device_seconds(last, heavier) > 4 * device_seconds(last, unchained)


@pytest.mark.parametrize("channels, unaligned", [(3, True), (8, False), (64, False)])
def test_a_convolution_with_unaligned_input_channels_is_priced_at_its_own_efficiency(channels, unaligned):
    def make():
        x, w = _image((64, channels, 112, 112)), _image((64, channels, 7, 7))
        return lambda: F.conv2d(x, w, stride=2, padding=3)
    base = dict(part("h100-sxm"), convolution_layout_conversion=0.0)  # (the arithmetic alone)
    efficiency = dict(base["efficiency"], convolution=0.5, convolution_unaligned=0.05)
    slow = device_seconds(make, dict(base, efficiency=efficiency, convolution_floor=0.0))
    fast = device_seconds(make, dict(base, efficiency=dict(efficiency, convolution_unaligned=0.5), convolution_floor=0.0))
    assert (slow > 3 * fast) if unaligned else slow == pytest.approx(fast, rel=1e-9)


def test_a_convolution_with_unaligned_input_channels_is_priced_by_its_flops_not_tensor_core_tiles():
    # (the library's generic implicit GEMM: an H100 took 635-680 us for a ResNet stem, [64, 3, 224, 224]
    # by 64 7x7 filters, and 604 us for a ViT's patches, by 768 16x16 ones at stride 16: 15 GFLOP each.
    # A tensor-core tile of 128 output channels would have priced the stem's 64 at twice its FLOPs.)
    def conv(weight, stride, padding):
        def make():
            x, w = _image((64, 3, 224, 224)), _image(weight)
            return lambda: F.conv2d(x, w, stride=stride, padding=padding)
        return make
    profile = dict(part("h100-sxm"), convolution_floor=0.0, convolution_layout_conversion=0.0)
    profile["efficiency"] = dict(profile["efficiency"], convolution_unaligned=0.03)
    stem, patches = conv((64, 3, 7, 7), 2, 3), conv((768, 3, 16, 16), 16, 0)
    flops = {"stem": 2 * 64 * 64 * 112 * 112 * 3 * 49, "patches": 2 * 64 * 768 * 14 * 14 * 3 * 256}
    rate = profile["matrix_flops"]["bfloat16"] * 0.03
    kernel = profile["kernel_overhead"]
    assert device_seconds(stem, profile) == pytest.approx(kernel + flops["stem"] / rate, rel=1e-3)
    assert device_seconds(patches, profile) == pytest.approx(kernel + flops["patches"] / rate, rel=1e-3)


def test_a_convolution_call_takes_the_profiles_host_time_forward_and_backward():
    def make():
        x, w = _image((8, 16, 28, 28), grad=True), _image((16, 16, 3, 3), grad=True)
        g = torch.empty(8, 16, 28, 28, device="simhpu", dtype=torch.bfloat16)
        return lambda: torch.autograd.grad(F.conv2d(x, w, padding=1), (x, w), g)
    base = dict(part("h100-sxm"), host_convolution_overhead=0.0, host_convolution_backward_overhead=0.0)
    _launches(make, base)  # (a first call's one-time Python, its imports' lines, aside)
    _, plain = _launches(make, base)
    _, forward = _launches(make, dict(base, host_convolution_overhead=40e-6))
    _, backward = _launches(make, dict(base, host_convolution_backward_overhead=300e-6))
    assert forward - plain == pytest.approx(40e-6, rel=1e-6)
    assert backward - plain == pytest.approx(300e-6, rel=1e-6)


def _conv_launch_seconds(make, profile) -> list[float]:
    """Each convolution launch's device time (its kernels' own spans), in order."""
    launches, _ = _launches(make, profile)
    return [x.duration for x in launches if "convolution" in x.op]


@pytest.mark.parametrize("shape, weight, stride, padding, fmt, dtype, converted", [
    ((16, 64, 28, 28), (64, 64, 3, 3), 1, 1, torch.contiguous_format, torch.bfloat16, True),
    ((16, 64, 28, 28), (128, 64, 1, 1), 2, 0, torch.contiguous_format, torch.float16, True),  # (strided: not a plain GEMM)
    ((16, 64, 28, 28), (64, 64, 3, 3), 1, 1, torch.channels_last, torch.bfloat16, False),
    ((16, 64, 28, 28), (128, 64, 1, 1), 1, 0, torch.contiguous_format, torch.bfloat16, False),  # (a GEMM as it lies)
    ((16, 64, 28, 28), (64, 64, 3, 3), 1, 1, torch.contiguous_format, torch.float32, False),
])
def test_a_channels_first_16bit_convolution_is_priced_with_its_librarys_layout_conversions(
        shape, weight, stride, padding, fmt, dtype, converted):
    # (cuDNN's tensor-core kernels run channels-last: a channels-first call's input and weight are
    # transposed in and its output out, a kernel each, what the part's step profile shows)
    def make():
        x = torch.empty(*shape, device="simhpu", dtype=dtype).to(memory_format=fmt)
        w = torch.empty(*weight, device="simhpu", dtype=dtype).to(memory_format=fmt)
        return lambda: F.conv2d(x, w, stride=stride, padding=padding)
    base = dict(part("h100-sxm"), convolution_layout_conversion=0.0)
    plain, = _conv_launch_seconds(make, base)
    converting, = _conv_launch_seconds(make, dict(base, convolution_layout_conversion=1e-11))
    out = (shape[0], weight[0], *((size + 2 * padding - k) // stride + 1 for size, k in zip(shape[2:], weight[2:])))
    elements = math.prod(shape) + math.prod(weight) + math.prod(out)
    expected = 3 * base["kernel_overhead"] + elements * 1e-11 if converted else 0.0
    assert converting - plain == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_a_convolutions_backward_is_the_forwards_implicit_gemm_for_each_gradient_it_computes():
    # (its data and weight gradients are products of the forward's size: one gradient asked for is
    # one forward's work, both are two; their layout conversions follow the same gradients)
    def make(grads):
        def build():
            x = _image((64, 64, 56, 56), grad="input" in grads)
            w = _image((64, 64, 3, 3), grad="weight" in grads)
            y = F.conv2d(x, w, padding=1)
            g = torch.empty_like(y)
            wanted = [t for t, name in ((x, "input"), (w, "weight")) if name in grads]
            return lambda: torch.autograd.grad(F.conv2d(x, w, padding=1), wanted, g)
        return build
    profile = dict(part("h100-sxm"), convolution_layout_conversion=0.0)
    profile["efficiency"] = dict(profile["efficiency"], convolution=0.5, convolution_backward=0.5)
    forward, one = _conv_launch_seconds(make(("weight",)), profile)
    _, other = _conv_launch_seconds(make(("input",)), profile)
    _, both = _conv_launch_seconds(make(("input", "weight")), profile)
    kernel = profile["kernel_overhead"]
    assert one - kernel == pytest.approx(forward - kernel, rel=1e-6)
    assert other == pytest.approx(one, rel=1e-6)
    assert both - kernel == pytest.approx(2 * (forward - kernel), rel=0.05)


def test_a_convolutions_efficiency_and_layout_conversion_are_fitted_together():
    # rows made by a profile with a known efficiency and conversion time (channels-first calls,
    # which convert, beside channels-last and 1x1 ones, which do not): the fit finds both again
    truth = dict(part("h100-sxm"), host_convolution_overhead=0.0, convolution_floor=0.0,
                 convolution_layout_conversion=3e-12)
    truth["efficiency"] = dict(truth["efficiency"], convolution=0.4)
    cases = [dict(kind="gemm", call=part_measure.CONV_F, dtype="bfloat16", input=[n, c, size, size],
                  weight=[c, c, k, k], stride=1, padding=k // 2, timing="device (CUDA graph of 10 calls)", seconds=1.0,
                  **({"memory_format": "channels_last"} if last else {}))
             for n, c, size, k, last in ((64, 64, 56, 3, False), (64, 128, 28, 3, False), (64, 512, 7, 3, False),
                                         (32, 128, 28, 3, True), (64, 256, 56, 1, False), (128, 256, 14, 3, True))]
    rows = [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, part_fit.check(truth))]
    start = dict(truth, convolution_layout_conversion=0.0)
    start["efficiency"] = dict(truth["efficiency"], convolution=0.8)
    fitted = part_fit._convolution_terms(start, rows, "convolution", lambda row: 0.0, conversion=True)
    assert fitted["efficiency"] == pytest.approx(0.4, rel=0.05)
    assert fitted["conversion"] == pytest.approx(3e-12, rel=0.05)
    assert fitted["host"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("field, value", [("host_convolution_backward_overhead", -1e-6),
                                          ("host_convolution_overhead", 1.0),
                                          ("convolution_layout_conversion", 1e-6),
                                          ("strided_elementwise", -1e-12), ("strided_elementwise", 1e-6)])
def test_a_convolution_host_time_out_of_range_is_refused_by_name(field, value):
    with pytest.raises(ProfileError, match=field):
        load_profile(dict(part_fit._raw("h100-sxm"), **{field: value}))


def test_every_vision_case_is_priceable_on_simhpu():
    # (what part_measure times on a part for batch norm, pooling, convolutions and short attention:
    # the fit needs each priced as the part ran it)
    rows = [dict(case, seconds=1e-3, timing="CUDA events around each call") for case in part_measure.vision_cases()
            if case["kind"] != "gemm" or math.prod(case["input"]) <= 1 << 22]
    results = part_fit.evaluate(rows, part_fit.check(part("h100-sxm")))
    assert len(results) == len(rows)
    assert all(r["priced"] and r["priced"] > 0 for r in results), [r.get("failure") for r in results]


def test_every_recurrent_case_is_priceable_and_runs_on_the_device():
    # (what part_measure times on a part for LSTM and GRU stacks; the call itself runs here too, smaller)
    rows = [dict(case, seconds=1e-3, timing="CUDA events around each call") for case in part_measure.recurrent_cases()]
    results = part_fit.evaluate(rows, part_fit.check(part("h100-sxm")))
    assert len(results) == len(rows) and {r["row"]["kind"] for r in results} == {"recurrent"}
    assert all(r["priced"] and r["priced"] > 0 for r in results), [r.get("failure") for r in results]
    for call in part_measure.RECURRENT:
        case = dict(kind="recurrent", call=call, dtype="float32", steps=3, batch=2, input=4, hidden=5, layers=2)
        out = part_measure.build(case, "simhpu")()
        assert (out[0] if isinstance(out, tuple) else out).shape[0] == 2


def test_the_shared_files_optimizer_rows_are_priced_on_the_parameter_sets_they_timed():
    # (its rows name GPT-2 124M and Llama 3.2 1B, with their element counts: the sets are those, exactly)
    for tensors, numel in ((148, 124475904), (147, 1498482688)):
        case = part_fit.normalised(dict(kind="optimizer", call="AdamW step (foreach)", tensors=tensors, numel=numel))
        shapes = part_measure.PARAMETER_SETS[case["parameters"]]()
        assert len(shapes) == tensors and sum(math.prod(s) for s in shapes) == numel
    # a set it cannot name is left out, not made up
    assert part_fit.normalised(dict(kind="optimizer", call="AdamW step (foreach)", tensors=147, numel=10)) is None


def test_a_fused_optimizer_is_priced_by_its_own_class_not_a_foreach_steps():
    def make(fused):
        def build():
            params = [torch.empty(1 << 16, device="simhpu").requires_grad_() for _ in range(8)]
            for p in params:
                p.grad = torch.empty_like(p)
            optimizer = torch.optim.AdamW(params, fused=fused, foreach=not fused)
            optimizer.step()
            return optimizer.step
        return build
    base = part("h100-sxm")
    plain = dict(base, memory_classes={"multi_tensor": {"traffic": 1.0}, "fused_optimizer": {"traffic": 1.0}})
    heavy = dict(base, memory_classes={"multi_tensor": {"traffic": 1.0}, "fused_optimizer": {"traffic": 8.0}})
    assert device_seconds(make(True), heavy) > 4 * device_seconds(make(True), plain)
    assert device_seconds(make(False), heavy) == pytest.approx(device_seconds(make(False), plain), rel=1e-6)


def test_a_convolutions_host_time_and_efficiency_are_fitted_together():
    # rows made by a profile with a known host time and efficiency: the fit finds both again
    truth = dict(part("h100-sxm"), host_convolution_overhead=50e-6, convolution_floor=0.0)
    truth["efficiency"] = dict(truth["efficiency"], convolution=0.3)
    cases = [dict(kind="gemm", call=part_measure.CONV_F, dtype="bfloat16", input=[n, 64, 28, 28], weight=[64, 64, 3, 3],
                  stride=1, padding=1, timing="CUDA events around each call, median of 10", seconds=1.0)
             for n in (2, 8, 32, 128)]
    rows = [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, part_fit.check(truth))]
    start = dict(truth, host_convolution_overhead=0.0)
    start["efficiency"] = dict(truth["efficiency"], convolution=0.6)
    fitted = part_fit._convolution_terms(start, rows, "convolution", lambda row: 0.0)
    assert fitted["host"] == pytest.approx(50e-6, rel=0.05)
    assert fitted["efficiency"] == pytest.approx(0.3, rel=0.05)


def _cpu_rows(truth: dict, cases: list[dict]) -> list[dict]:
    """Rows a CPU (wall clock around each call) would give if `truth` were the part."""
    cases = [dict(c, timing="wall clock around 1 call(s) after synchronising, median of 5", seconds=1.0) for c in cases]
    return [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, part_fit.check(truth))]


def test_a_synchronous_parts_convolution_time_a_call_is_fitted_as_added_to_its_work():
    # (a CPU spends a convolution's setup before its arithmetic: a fixed time added to the work, where
    # a floor the work may hide under would price every small call at the floor alone)
    truth = dict(part("cpu-host"), host_convolution_overhead=80e-6, convolution_floor=0.0)
    truth["efficiency"] = dict(truth["efficiency"], convolution=0.5)
    rows = _cpu_rows(truth, [dict(kind="gemm", call=part_measure.CONV_F, dtype="float32", input=[n, 16, 16, 16],
                                  weight=[16, 16, 3, 3], stride=1, padding=1) for n in (1, 4, 16, 64)])
    start = dict(truth, host_convolution_overhead=0.0, convolution_floor=0.0)
    start["efficiency"] = dict(truth["efficiency"], convolution=0.9)
    fitted, _ = part_fit.fit(rows, start, log=lambda *_: None)
    assert fitted["convolution_floor"] == 0.0
    assert fitted["host_convolution_overhead"] == pytest.approx(80e-6, rel=0.05)
    assert fitted["efficiency"]["convolution"] == pytest.approx(0.5, rel=0.05)


def test_a_class_timed_only_below_the_large_size_takes_its_traffic_from_its_largest_rows():
    # (a CPU's pooling rows are a hundredth of its largest elementwise rows: the class must still be fitted)
    base = part("cpu-host")
    truth = dict(base, memory_classes=dict(base.get("memory_classes", {}), pooling={"traffic": 12.0, "floor": 0.0}))
    cases = [dict(kind="memory-bound", call="x + y", dtype="float32", numel=1 << 22)]
    cases += [dict(kind="memory-bound", call=part_measure.MAX_POOL[0], dtype="float32", shape=shape)
              for shape in ([4, 16, 16, 16], [8, 32, 32, 32])]
    start = dict(base, memory_classes=dict(base.get("memory_classes", {}), pooling={"traffic": 1.0, "floor": 0.0}))
    fitted, _ = part_fit.fit(_cpu_rows(truth, cases), start, log=lambda *_: None)
    assert fitted["memory_classes"]["pooling"]["traffic"] == pytest.approx(12.0, rel=0.05)


def test_a_part_without_multi_tensor_apply_fits_no_multi_tensor_traffic():
    # (its foreach steps run tensor by tensor: a traffic no row responds to would run to its bound)
    base = part("cpu-host")
    cases = [dict(kind="optimizer", call=part_measure.ADAMW[0], tensors=6, width=32)]
    rows = [dict(row, seconds=row["seconds"] * 3) for row in _cpu_rows(base, cases)]
    fitted, _ = part_fit.fit(rows, base, log=lambda *_: None)
    assert fitted["memory_classes"].get("multi_tensor") == base.get("memory_classes", {}).get("multi_tensor")


def _with_column_step(row_step, traffic=1.0):
    base = part("h100-sxm")
    return dict(base, memory_classes=dict(base["memory_classes"],
                                          column_reduction={"traffic": traffic, "floor": 0.0, "row_step": row_step}))


@pytest.mark.parametrize("reduce, column", [
    (lambda x: x.sum(0), True),             # the stub route: the iterator's output of stride 0
    (lambda x: x.amax(0), True),            # the reference route: its `dim` argument
    (lambda x: x.mean(0, keepdim=True), True),
    (lambda x: x.sum(-1), False),           # a row reduction reads along the contiguous dimension
    (lambda x: x.amax(1), False),
    (lambda x: x.t().sum(1), True),         # the input's layout, not its shape's order, says which
    (lambda x: x.sum(), False),
])
def test_a_column_reduction_walks_its_rows_in_a_chain(reduce, column):
    # (a reduction that keeps its input's contiguous dimension, x.sum(0) for a bias's gradient, is
    # as parallel as its outputs: its rows add one after another; measured 2-6x a row sum's time)
    def make():
        x = torch.empty(16384, 256, device="simhpu", dtype=torch.bfloat16)
        return lambda: reduce(x)
    without, with_step = device_seconds(make, _with_column_step(0.0)), device_seconds(make, _with_column_step(1e-8))
    if column:
        assert with_step - without == pytest.approx(16384 * 1e-8, rel=0.05)
    else:
        assert with_step == pytest.approx(without)


def test_a_profile_without_a_class_prices_it_as_its_kin():
    base = part("h100-sxm")
    classes = {c: v for c, v in base["memory_classes"].items() if c != "column_reduction"}
    loaded = load_profile(dict(base, memory_classes=dict(classes, reduction={"traffic": 3.0, "floor": 2e-6})))
    assert loaded["memory_classes"]["column_reduction"] == {"traffic": 3.0, "floor": 2e-6, "row_step": 0.0, "rate": 0.0}
    with pytest.raises(ProfileError, match=r"memory_classes\.column_reduction\.row_step"):
        load_profile(_with_column_step(1e-3))


def test_a_column_reductions_traffic_and_row_step_are_fitted_together():
    # rows made by a profile with a known traffic and row step: the fit finds both again
    truth = _with_column_step(0.8e-9, traffic=1.5)
    cases = [dict(kind="memory-bound", call=part_measure.COLUMN_SUM, dtype="bfloat16", shape=shape,
                  timing="device (CUDA graph of 20 calls, median of 5 replays)", seconds=1.0)
             for shape in ([65536, 256], [25088, 768], [8192, 3072])]
    rows = [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, part_fit.check(truth))]
    traffic, row_step = part_fit._traffic_and_row_step(_with_column_step(0.0), "column_reduction", rows)
    assert traffic == pytest.approx(1.5, rel=0.05)
    assert row_step == pytest.approx(0.8e-9, rel=0.05)


def _faster_memory(profile):
    # (a part of the family: the same die, a memory 1.43x faster, as the H200's is the H100's)
    return dict(profile, memory_bandwidth=profile["memory_bandwidth"] * 1.43)


def _layer_norm_rows(profile, part_of=lambda p: p):
    cases = [dict(kind="memory-bound", call="F.layer_norm(x, (cols,), w) forward", dtype="bfloat16", shape=shape,
                  timing="device (CUDA graph of 20 calls, median of 5 replays)", seconds=1.0)
             for shape in ([8192, 4096], [16384, 8192], [4096, 32768])]
    return [dict(r["case"], seconds=r["priced"]) for r in part_fit.evaluate(cases, part_fit.check(part_of(profile)))]


def test_a_class_bound_by_its_units_takes_as_long_on_a_faster_memory():
    norm = {"traffic": 1.0, "floor": 0.0, "rate": 1e12}
    bound = dict(part("h100-sxm"), memory_classes=dict(part("h100-sxm")["memory_classes"], norm=norm))
    free = dict(bound, memory_classes=dict(bound["memory_classes"], norm=dict(norm, rate=0.0)))
    def seconds(profile):
        return [row["seconds"] for row in _layer_norm_rows(profile)]
    assert seconds(bound) == pytest.approx(seconds(_faster_memory(bound)), rel=0.02)
    assert all(a > 1.3 * b for a, b in zip(seconds(free), seconds(_faster_memory(free))))


def test_a_family_fit_tells_a_classs_traffic_from_its_units_rate():
    # rows made on two parts of a family by a profile with a known traffic and rate (memory-bound on the
    # slower memory, units-bound on the faster): the fit finds both
    truth = part("h100-sxm")
    truth = dict(truth, memory_classes=dict(truth["memory_classes"], norm={"traffic": 1.3, "floor": 0.0, "rate": 3e12}))
    start = dict(truth, memory_classes=dict(truth["memory_classes"], norm={"traffic": 1.0, "floor": 0.0}))
    part_fit.fit_family(start, _layer_norm_rows(truth), _layer_norm_rows(truth, _faster_memory), _faster_memory)
    fitted = start["memory_classes"]["norm"]
    assert fitted["traffic"] == pytest.approx(1.3, rel=0.06)
    assert fitted["rate"] == pytest.approx(3e12, rel=0.06)


def test_a_class_only_one_part_timed_at_more_passes_than_its_kernels_make_is_bound_by_the_units_the_family_shares():
    # (a channels-first batch norm or a max-pool took as long on the H200 as on the H100 in both parts'
    # step profiles; only the H100 timed their calls, at 6x and 2.7x their bytes' one pass: a traffic no
    # kernel of theirs makes. The family keeps such a class's time on the part that timed it.)
    def batch_norm():
        x = torch.empty(32, 64, 56, 56, device="simhpu", dtype=torch.bfloat16)
        return lambda: F.batch_norm(x, None, None, training=True)

    def add():
        x = torch.empty(1 << 24, device="simhpu")
        return lambda: x + x
    base = part("h100-sxm")
    classes = dict(base["memory_classes"], batch_norm={"traffic": 6.0, "row_step": 0.0},
                   reduction={"traffic": 1.5, "floor": 0.0})
    fitted = dict(base, memory_classes=copy.deepcopy(classes))
    notes = part_fit.fit_family(fitted, [], [], _faster_memory)  # (neither part timed either class)
    assert fitted["memory_classes"]["batch_norm"]["traffic"] == 1.0 and fitted["memory_classes"]["batch_norm"]["rate"] > 0
    assert any("class batch_norm: units' rate" in note for note in notes)
    assert fitted["memory_classes"]["reduction"] == classes["reduction"]  # (1.5 passes: the memory's still)
    before = dict(base, memory_classes=classes)
    assert device_seconds(batch_norm, fitted) == pytest.approx(device_seconds(batch_norm, before), rel=1e-6)
    assert device_seconds(batch_norm, _faster_memory(fitted)) == pytest.approx(device_seconds(batch_norm, fitted), rel=1e-6)
    assert device_seconds(batch_norm, _faster_memory(before)) < 0.8 * device_seconds(batch_norm, before)
    assert device_seconds(add, _faster_memory(fitted)) < 0.8 * device_seconds(add, fitted)


def test_another_machines_host_scales_what_its_host_rows_do_not_time():
    # (a launch row timed on a host half as fast: its dispatch and launch fitted on it, and the host
    # time no row times, a line of Python and cuDNN's per-call work, taken as half as fast alike)
    base = dict(part("h100-sxm"), host_python_line=1e-6, host_autograd_overhead=20e-6, host_optimizer_overhead=1e-6,
                host_convolution_overhead=10e-6, host_convolution_backward_overhead=100e-6)
    per_launch = base["host_op_overhead"] + base["host_launch_overhead"]
    row = dict(kind="launch", call=part_measure.LAUNCH_HOST, seconds=2 * per_launch, timing="host wall clock")
    slower = part_fit.with_host_of(base, [row])
    assert slower["host_op_overhead"] + slower["host_launch_overhead"] == pytest.approx(2 * per_launch, rel=1e-9)
    for field in part_fit.HOST_BESIDES_LAUNCH:
        assert slower[field] == pytest.approx(2 * base[field], rel=1e-9), field
    assert base["host_python_line"] == 1e-6  # (the profile given is left as it was)
    # a constant the machine's rows do time is theirs, not scaled
    autograd_row = part_fit.evaluate([dict(kind="launch", call=part_measure.AUTOGRAD_HOST, ops=16, seconds=1.0)],
                                     part_fit.check(dict(slower, host_autograd_overhead=70e-6)))[0]
    timed = part_fit.with_host_of(base, [row, dict(autograd_row["case"], seconds=autograd_row["priced"])])
    assert timed["host_autograd_overhead"] == pytest.approx(70e-6, rel=0.05)


def test_a_refit_on_one_machines_rows_then_anothers_host_gives_back_the_host_it_started_from():
    # (part_calibration fits the calibration machine's rows, then takes HOST_MACHINE's host: a constant
    # neither times, a line of Python, had been scaled to the second machine's speed on every run,
    # 1.19x a run, as the fit left it at the second machine's speed while setting the first's launch)
    base = dict(part("h100-sxm"), host_python_line=1e-6, host_autograd_overhead=20e-6)
    per_launch = base["host_op_overhead"] + base["host_launch_overhead"]
    launch = lambda seconds: dict(kind="launch", call=part_measure.LAUNCH_HOST, seconds=seconds,  # noqa: E731
                                  timing="host wall clock")
    profile = base
    for _ in range(3):
        calibrated, _ = part_fit.fit([launch(0.8 * per_launch)], profile, log=lambda *_: None)
        assert calibrated["host_python_line"] == pytest.approx(0.8e-6, rel=1e-9)  # (at the first machine's speed)
        profile = part_fit.with_host_of(calibrated, [launch(per_launch)])
        assert profile["host_python_line"] == pytest.approx(1e-6, rel=1e-9)
        assert profile["host_autograd_overhead"] == pytest.approx(20e-6, rel=1e-9)


def test_the_cpu_as_a_part_keeps_the_memory_it_freed_as_a_caching_allocator_does(tmp_path):
    """A step's activations live to its backward and are freed at its end: with the heap kept, their pages stay
    mapped for the next step, as a device's caching allocator keeps its blocks (with glibc's own thresholds the
    first such step gives them back, and GPT-2's step at cpu scale faulted 200-530 pages in anew at each step,
    3 ms of its 31). In a process of its own: keep_the_heap holds for the rest of the process."""
    script = """
import os, torch
from torch_simhpu.simulation import part_measure
assert part_measure.keep_the_heap()
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
before = resident()
activations = [torch.ones(1 << 18) for _ in range(64)]  # (64 MB)
held = resident() - before
del activations
print(held, resident() - before)
print(part_measure.part_description("cpu")["heap"])
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)  # (not the repository's root: its torch_simhpu/ would shadow the wheel)
    assert result.returncode == 0, result.stderr[-2000:]
    sizes, heap = result.stdout.split("\n")[:2]
    held, after_freeing = map(int, sizes.split())
    assert held >= 60 << 20 and after_freeing >= 0.9 * held and heap.startswith("kept")


def _bytes_of(fn, *args) -> dict[str, float]:
    """The bytes each operator's kernels move, as priced on the H100 profile."""
    kernels = torch.simhpu.price(fn, *args, profile=part("h100-sxm")).kernels
    out: dict[str, float] = {}
    for k in kernels:
        name = k.op.split("::")[-1].split(".")[0]
        out[name] = out.get(name, 0.0) + k.bytes
    return out


@pytest.mark.parametrize("classes", [1000, 50304])
def test_nll_loss_reads_its_input_only_where_the_targets_point(classes):
    # (the part's kernel reads one logit a target: 8192 targets over a 50k-word vocabulary read
    # 8192 values, not 1.6 GB; its backward writes its gradient and reads nothing of the input)
    targets = torch.zeros(8192, dtype=torch.long)
    logits = torch.empty(8192, classes, requires_grad=True)
    moved = _bytes_of(lambda x, y: torch.autograd.grad(F.nll_loss(x, y), (x,)), logits, targets)
    assert moved["nll_loss_forward"] < 8192 * (8 + 4) + 64
    assert moved["nll_loss_backward"] == pytest.approx(8192 * classes * 4, rel=0.01)


def test_a_gather_reads_the_rows_its_indices_name_not_the_whole_table():
    table = torch.empty(50304, 768, dtype=torch.bfloat16)
    index = torch.zeros(1024, dtype=torch.long)
    row = 768 * 2
    for fn in (lambda w, i: F.embedding(i, w), lambda w, i: torch.index_select(w, 0, i)):
        # (the rows it reads, the indices, the rows it writes)
        assert sum(_bytes_of(fn, table, index).values()) == pytest.approx(1024 * (2 * row + 8))
    columns = torch.zeros(512, dtype=torch.long)
    along_columns = _bytes_of(lambda w, i: torch.index_select(w, 1, i), table, columns)
    assert sum(along_columns.values()) == pytest.approx(50304 * 512 * 2 * 2 + 512 * 8)
    assert _bytes_of(lambda w, i: torch.index_select(w, -1, i), table, columns) == along_columns


def test_a_softmax_backward_is_priced_by_a_class_of_its_own():
    # (a forward passes over a row for its maximum and sum before it writes, a backward once for a
    # dot product: on a part they take different shares of their bytes' time)
    def make():
        x = torch.empty(8192, 4096, device="simhpu", dtype=torch.bfloat16, requires_grad=True)
        g = torch.empty(8192, 4096, device="simhpu", dtype=torch.bfloat16)
        return lambda: torch.autograd.grad(torch.softmax(x, -1), (x,), g)
    base = part("h100-sxm")
    classes = {c: v for c, v in base["memory_classes"].items() if c not in ("softmax", "softmax_backward")}
    plain = dict(base, memory_classes=dict(classes, softmax={"traffic": 1.0}, softmax_backward={"traffic": 1.0}))
    heavier = dict(base, memory_classes=dict(classes, softmax={"traffic": 1.0}, softmax_backward={"traffic": 4.0}))
    assert device_seconds(make, heavier) > 2 * device_seconds(make, plain)
    # a profile written before the class was told apart prices it as a softmax
    loaded = load_profile(dict(base, memory_classes=dict(classes, softmax={"traffic": 2.5})))
    assert loaded["memory_classes"]["softmax_backward"]["traffic"] == 2.5


def test_a_softmax_takes_the_kernel_the_parts_library_takes_for_its_rows_length():
    # PyTorch's CUDA softmax holds a row of 2,049 to 9,216 elements in its threads' registers
    # (scalar loads: a rate of its own); shorter rows a warp each, longer ones from memory
    def softmax_of(shape, dim=-1, dtype=torch.bfloat16):
        def make():
            x = torch.empty(*shape, device="simhpu", dtype=dtype)
            return lambda: torch.softmax(x, dim)
        return make
    base = part("h100-sxm")
    classes = {c: v for c, v in base["memory_classes"].items() if not c.startswith("softmax")}
    plain = dict(base, memory_classes=dict(classes, softmax={"traffic": 1.0}, softmax_in_registers={"traffic": 1.0}))
    held = dict(base, memory_classes=dict(classes, softmax={"traffic": 1.0}, softmax_in_registers={"traffic": 4.0}))
    for shape, in_registers in (([4096, 4096], True), ([2048, 8192], True), ([8192, 2048], False),
                                ([512, 32768], False), ([2048, 9216], True), ([2048, 9217], False)):
        slower = device_seconds(softmax_of(shape), held) / device_seconds(softmax_of(shape), plain)
        assert (slower > 2) == in_registers, (shape, slower)
    # along a dimension that is not the contiguous one: the library's spatial kernel, not the row kernels
    assert device_seconds(softmax_of([4096, 4096], dim=0), held) < 1.5 * device_seconds(softmax_of([4096, 4096], dim=0), plain)
    # a row's bytes decide the warp kernel too: 2,048 float64 elements are 16 KiB, past a warp's 8 KiB
    assert _C._simclock_softmax_rows_in_registers(2048, 8, load_profile(base))
    assert not _C._simclock_softmax_rows_in_registers(2048, 4, load_profile(base))
    # a part without the library's row kernels (a CPU): one class whatever the length
    cpu = load_profile("cpu-host")
    assert cpu["softmax_rows"]["enabled"] is False
    assert not _C._simclock_softmax_rows_in_registers(4096, 2, cpu)
    # a profile written before the class was told apart prices it as a softmax
    loaded = load_profile(dict(base, memory_classes=dict(classes, softmax={"traffic": 2.5})))
    assert loaded["memory_classes"]["softmax_in_registers"]["traffic"] == 2.5


def test_the_fit_gives_a_softmax_row_the_class_its_length_takes():
    profile = load_profile("h100-sxm")
    row = dict(kind="memory-bound", call="torch.softmax(x, -1)", dtype="bfloat16")
    assert part_fit.call_class(dict(row, shape=[8192, 4096]), profile) == "softmax_in_registers"
    assert part_fit.call_class(dict(row, shape=[8192, 32768]), profile) == "softmax"
    assert part_fit.call_class(dict(row, shape=[8192, 4096]), load_profile("cpu-host")) == "softmax"
    assert part_fit.call_class(dict(row, call="torch.softmax(x, -1) forward + backward", shape=[8192, 4096]),
                               profile) == "softmax_backward"


def test_a_dropout_is_priced_as_the_one_kernel_a_part_runs_for_it():
    # CUDA draws the mask and writes the output in one pass; simhpu's composite draws the mask, then
    # converts it and multiplies twice: the draw stands for the part's kernel, the rest is simhpu's own
    def make(dtype):
        x = torch.empty(1 << 20, device="simhpu", dtype=dtype)
        return lambda: F.dropout(x, 0.1)
    for dtype, size in ((torch.bfloat16, 2), (torch.float32, 4)):
        launches, _ = _launches(lambda: make(dtype), part("h100-sxm"))
        assert [x.op for x in launches] == ["aten::bernoulli_.float"]
        assert launches[0].bytes == (1 << 20) * (size + size + 1)  # input, output, a boolean mask
    # and it still computes the dropout
    x = torch.ones(4096, device="simhpu")
    out, mask = torch.native_dropout(x, 0.25, True)
    torch.testing.assert_close(out.cpu(), mask.cpu().float() / 0.75)
    assert 0.6 < mask.float().mean().item() < 0.9


def test_a_conversion_to_wider_elements_is_priced_by_a_class_of_its_own():
    # bfloat16 -> float32 takes as long on an H200 as on an H100 (its cast kernel, not the memory,
    # bounds it), where float32 -> bfloat16 and a clone take what their bytes take
    def convert(source, target):
        def make():
            x = torch.empty(1 << 22, device="simhpu", dtype=source)
            return lambda: x.to(target) if target != source else x.clone()
        return make
    base = part("h100-sxm")
    classes = {c: v for c, v in base["memory_classes"].items() if c not in ("copy", "widening_copy")}
    plain = dict(base, memory_classes=dict(classes, copy={"traffic": 1.0}, widening_copy={"traffic": 1.0}))
    wide = dict(base, memory_classes=dict(classes, copy={"traffic": 1.0}, widening_copy={"traffic": 4.0}))
    for source, target, widens in ((torch.bfloat16, torch.float32, True), (torch.float16, torch.float32, True),
                                   (torch.float32, torch.bfloat16, False), (torch.bfloat16, torch.bfloat16, False)):
        slower = device_seconds(convert(source, target), wide) / device_seconds(convert(source, target), plain)
        assert (slower > 2) == widens, (source, target, slower)
    # the fit's rows: part_measure converts a bfloat16 or float16 x to float32, a float32 one to bfloat16
    row = dict(kind="memory-bound", call="x.to(other dtype)")
    assert part_fit.call_class(dict(row, dtype="bfloat16"), load_profile(base)) == "widening_copy"
    assert part_fit.call_class(dict(row, dtype="float32"), load_profile(base)) == "copy"
    # a profile written before the class was told apart prices it as a copy
    loaded = load_profile(dict(base, memory_classes=dict(classes, copy={"traffic": 1.7})))
    assert loaded["memory_classes"]["widening_copy"]["traffic"] == 1.7


def _part_calibration():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "part_calibration.py"
    spec = importlib.util.spec_from_file_location("part_calibration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_steps_channels_first_batch_norms_become_rows_of_the_calls_part_measure_times(tmp_path):
    # (the ResNet step's batch norms are the fit's rows at a step's shapes, where a channel's block walks
    # its elements in a chain: forward, and forward + backward, each call's kernels' own time)
    stats = "void at::native::batch_norm_collect_statistics_kernel<at::native::Var, c10::BFloat16, c10::BFloat16, float"
    transform = "void at::native::batch_norm_transform_input_kernel<c10::BFloat16, float, float, true, int>"
    backward = "void at::native::batch_norm_backward_kernel<c10::BFloat16, float, float, int>(torch"
    channels_last = "void at::native::batch_norm_collect_channels_last_statistics_kernel<at::native::Var"
    ops = [
        dict(op="aten::native_batch_norm", shapes=[[64, 128, 28, 28], [128]], calls=5, device_us=256.5,
             kernels={stats: 5, transform: 5}),
        dict(op="aten::native_batch_norm_backward", shapes=[[64, 128, 28, 28]], calls=5, device_us=447.0,
             kernels={backward: 5}),
        # (a channels-last norm runs other kernels, timed by other rows: left out)
        dict(op="aten::native_batch_norm", shapes=[[64, 64, 56, 56]], calls=1, device_us=99.0, kernels={channels_last: 1}),
        dict(op="aten::native_batch_norm_backward", shapes=[[64, 64, 56, 56]], calls=1, device_us=99.0,
             kernels={backward: 1}),
    ]
    path = tmp_path / "step-kernels.json"
    path.write_text(json.dumps({"steps": [dict(model="resnet", operators=ops)]}))
    forward, both = _part_calibration().batch_norm_rows(path)
    assert (forward["call"], both["call"]) == part_measure.BATCH_NORM
    assert forward["dtype"] == both["dtype"] == "bfloat16" and forward["shape"] == both["shape"] == [64, 128, 28, 28]
    assert forward["seconds"] == pytest.approx(51.3e-6) and both["seconds"] == pytest.approx(51.3e-6 + 89.4e-6)
    assert "resnet step" in forward["timing"] and forward["timing"].startswith("kernels:")


def _recurrent_step_launches(cls, profile="h100-sxm", autocast=False, **options):
    """The kernels an nn.LSTM/GRU/RNN stack's forward and backward launch under phantom execution,
    as the part runs them (T=12 steps of 4 sequences, 16 inputs, 32 hidden, 2 layers, both directions)."""
    with simulate(part(profile), host_time="modelled", execute=False):
        rnn = cls(16, 32, num_layers=2, bidirectional=True, batch_first=True, **options).to("simhpu")
        x = torch.empty(4, 12, 16, device="simhpu").requires_grad_()
        torch.simhpu.synchronize()
        mark = _C._simclock_start_log()
        with torch.autocast("simhpu", dtype=torch.bfloat16, enabled=autocast):
            out, _ = rnn(x)
        out.float().sum().backward()
        torch.simhpu.synchronize()
        launches = _C._simclock_stop_log(mark, Launch)
        del rnn, x, out
    return launches


@pytest.mark.parametrize("cls,gates", [(torch.nn.LSTM, 4), (torch.nn.GRU, 3), (torch.nn.RNN, 1)])
def test_a_recurrent_layer_stack_is_priced_as_cudnn_runs_it_not_as_atens_composite(cls, gates):
    launches = _recurrent_step_launches(cls)
    forward = [x for x in launches if x.op.startswith("cudnn_rnn (")]
    backward = [x for x in launches if x.op.startswith("cudnn_rnn_backward (")]
    steps, layers_and_directions = 12, 4
    # cuDNN's standard algorithm: an input GEMM a layer and direction, a recurrent GEMM and a cell a step
    assert len(forward) == layers_and_directions * (1 + 2 * steps)
    # a cell and the state's GEMM a step, then the input's and both weights' gradients and the bias sums
    assert len(backward) == layers_and_directions * (2 * steps + 4)
    # nothing of ATen's composite (a dozen operators a step, forward and backward) reaches the part
    composite = {x.op.split(".")[0] for x in launches} - {x.op for x in forward + backward}
    assert not composite & {"aten::mm", "aten::addmm", "aten::sigmoid", "aten::tanh", "aten::mul", "aten::add",
                            "aten::sigmoid_backward", "aten::tanh_backward", "aten::_thnn_fused_lstm_cell"}, composite
    # (nor does a cell the composite runs open a call of its own inside the stack's)
    assert not any(op.startswith("fused_rnn_cell") for op in composite), composite
    recurrent = next(x for x in forward if x.op == "cudnn_rnn (recurrent GEMM)")
    assert recurrent.work == "matrix" and recurrent.flops == 2 * 4 * 32 * gates * 32
    # the first backward kernel starts after the last forward one: the engine reached the call's nodes
    assert min(x.start for x in backward) >= max(x.end for x in forward)


def test_every_training_step_of_a_recurrent_model_is_priced_alike():
    # (each step's backward finds its own call's nodes, after the last step's calls were forgotten)
    with simulate(part("h100-sxm"), host_time="modelled", execute=False):
        rnn = torch.nn.GRU(16, 32, num_layers=2).to("simhpu")
        head = torch.nn.Linear(32, 1).to("simhpu")
        x = torch.empty(10, 4, 16, device="simhpu")
        steps = []
        for _ in range(3):
            for p in [*rnn.parameters(), *head.parameters()]:
                p.grad = None  # (as a step's zero_grad leaves them: each step's first gradients are assigned)
            mark = _C._simclock_start_log()
            head(rnn(x)[0]).sum().backward()
            head(rnn(x)[0]).sum().backward()  # (two calls a step, each with its own backward)
            torch.simhpu.synchronize()
            steps.append([(k.op, round(k.duration, 12)) for k in _C._simclock_stop_log(mark, Launch)])
        del rnn, head, x
    assert steps[0] == steps[1] == steps[2]
    assert sum(op.startswith("cudnn_rnn_backward") for op, _ in steps[0]) == 2 * 2 * (2 * 10 + 4)


@pytest.mark.parametrize("cls", [torch.nn.LSTMCell, torch.nn.GRUCell])
def test_a_recurrent_cell_is_priced_as_its_two_gemms_and_one_fused_cell_kernel(cls):
    # (a decoder's loop: ATen's CUDA route fuses the cell, the device runs the composite's elementwise operators)
    with simulate(part("h100-sxm"), host_time="modelled", execute=False):
        cell = cls(16, 32).to("simhpu")
        x = torch.empty(4, 16, device="simhpu").requires_grad_()
        torch.simhpu.synchronize()
        mark = _C._simclock_start_log()
        out = cell(x)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
        torch.simhpu.synchronize()
        launches = _C._simclock_stop_log(mark, Launch)
        del cell, x, out
    ops = [x.op.split(".")[0] for x in launches]
    assert [op for op in ops if op.startswith("fused_rnn_cell (")] == [
        "fused_rnn_cell (input GEMM)", "fused_rnn_cell (hidden GEMM)", "fused_rnn_cell (cell)"]
    assert sum(op.startswith("fused_rnn_cell_backward (") for op in ops) == 6  # (the cell, the bias sums, 4 GEMMs)
    assert not set(ops) & {"aten::mm", "aten::addmm", "aten::sigmoid", "aten::tanh", "aten::mul", "aten::chunk"}, ops
    gates = 4 if cls is torch.nn.LSTMCell else 3
    assert next(x for x in launches if x.op == "fused_rnn_cell (hidden GEMM)").flops == 2 * 4 * gates * 32 * 32


def test_a_packed_sequence_is_priced_step_by_step_with_the_sequences_still_running():
    lengths = [12, 9, 9, 3]  # (a step takes the sequences not yet ended: 4 for 3 steps, 3 for 6, 1 for 3)
    with simulate(part("h100-sxm"), host_time="modelled", execute=False):
        rnn = torch.nn.LSTM(16, 32, batch_first=True).to("simhpu")
        x = torch.empty(4, 12, 16, device="simhpu").requires_grad_()
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(lengths), batch_first=True)
        torch.simhpu.synchronize()
        mark = _C._simclock_start_log()
        out, _ = rnn(packed)
        out.data.sum().backward()
        torch.simhpu.synchronize()
        launches = _C._simclock_stop_log(mark, Launch)
        del rnn, x, packed, out
    recurrent = [x for x in launches if x.op == "cudnn_rnn (recurrent GEMM)"]
    assert [x.flops // (2 * 32 * 4 * 32) for x in recurrent] == [4] * 3 + [3] * 6 + [1] * 3
    assert len([x for x in launches if x.op == "cudnn_rnn_backward (recurrent GEMM)"]) == 12
    assert not any(x.op.startswith("aten::sigmoid") for x in launches)
    inputs = next(x for x in launches if x.op == "cudnn_rnn (input GEMM)")
    assert inputs.flops == 2 * sum(lengths) * 4 * 32 * 16


def test_a_recurrent_gemm_is_priced_as_the_same_gemm_alone():
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # (as a float32 mm is priced: not in TF32)
        launches = _recurrent_step_launches(torch.nn.LSTM)
    recurrent = next(x for x in launches if x.op == "cudnn_rnn (recurrent GEMM)")
    x_gemm = next(x for x in launches if x.op == "cudnn_rnn (input GEMM)")

    def mm(m, n, k):
        def make():
            a, b = torch.empty(m, k, device="simhpu"), torch.empty(k, n, device="simhpu")
            return lambda: a @ b
        return make
    assert recurrent.duration == pytest.approx(device_seconds(mm(4, 4 * 32, 32)), rel=1e-6)
    assert x_gemm.duration == pytest.approx(device_seconds(mm(4 * 12, 4 * 32, 16)), rel=1e-6)


def test_a_recurrent_stack_under_autocast_is_priced_in_its_dtype_with_its_weights_cast():
    launches = _recurrent_step_launches(torch.nn.LSTM, autocast=True, dropout=0.1)
    assert {x.dtype for x in launches if x.op.startswith("cudnn_rnn (") and x.work == "matrix"} == {torch.bfloat16}
    names = [x.op for x in launches]
    # (PyTorch casts and re-flattens the weights for cuDNN each call; dropout between the two layers)
    assert names.count("cudnn_rnn (weights cast and flattened)") == 1
    assert names.count("cudnn_rnn (dropout)") == 1 and names.count("cudnn_rnn_backward (dropout)") == 1


def test_a_part_whose_host_runs_each_kernel_runs_the_recurrent_composite_itself():
    launches = _recurrent_step_launches(torch.nn.LSTM, profile="cpu-host")
    assert not any(x.op.startswith("cudnn_rnn") for x in launches)
    assert any(x.op.startswith("aten::sigmoid") for x in launches)


def test_addmm_with_its_activation_fused_is_priced_as_addmms_gemm():
    def make(fused):
        def build():
            bias, x, w = (torch.empty(*shape, device="simhpu") for shape in ([4096], [2048, 1024], [1024, 4096]))
            return (lambda: torch._addmm_activation(bias, x, w, use_gelu=True)) if fused else (lambda: torch.addmm(bias, x, w))
        return build
    assert device_seconds(make(True)) == pytest.approx(device_seconds(make(False)), rel=1e-6)


def test_the_transformer_inference_fast_path_is_priced_as_its_operators_not_as_one_kernel():
    # (eval mode without grad: torch._transformer_encoder_layer_fwd, one operator for the whole layer)
    def layer_call(fast):
        def build():
            layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, dropout=0.0, batch_first=True).to("simhpu")
            layer.train(not fast)
            x = torch.empty(8, 512, 1024, device="simhpu")

            def call():
                with torch.no_grad():
                    layer(x)
            return call
        return build
    fast, regular = device_seconds(layer_call(True)), device_seconds(layer_call(False))
    # the same GEMMs either way (the fast path's attention as ATen's composite runs it: here unfused)
    assert 0.8 < fast / regular < 1.5
