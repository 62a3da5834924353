"""Timing a real part: the calls a device profile is fitted on, and whole training steps.

This module needs torch alone (not torch_simhpu's extension), so it runs on any machine
torch runs on, an H100 without simhpu built included:

    python torch_simhpu/simulation/part_measure.py --device cuda -o rows.json     # by path: no package import

`python -m torch_simhpu.profile_part` calls it and then fits a profile on what it measured.
Rows have the shape of ../shared/measurements' files: kind, call, the call's sizes, seconds and
how they were timed. Every case is built from a description (CASES), so the pricing side can
make the same call on simhpu (torch_simhpu/profile_part.py, `call_of`).

How a call is timed:
- on CUDA: warmed up 3 times; a call expected under ~100 us is captured 20 times in a CUDA
  graph and the replay timed with events (the device's time alone, no launch gaps); a longer
  one with events around each call, the median of the repeats;
- elsewhere (the CPU, or any device with torch.accelerator): wall clock around each call after
  synchronising, the median of the repeats (the host's time is the part's time there);
- on the CPU, a call's operands rotate through copies that together exceed twice its last-level
  cache, so each call reads them from memory, as an operator of a training step does (other
  operators' data passed through the caches since it last ran), while the interpreter's and
  torch's own code and data stay cached, as in a step;
- a training step: wall clock around each of ten steps after three to warm up, the median, with
  the least and the most of the ten (`seconds_least`, `seconds_most`).
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------
# What is measured. Each case: kind, a call name (what the row's "call" says), sizes.
# The GPU set mirrors ../shared/measurements/h100-sxm-2026-11-27.json's kinds at its sizes;
# the CPU set is the same kinds at sizes a laptop-class host runs in seconds.
# ----------------------------------------------------------------------------------------

GEMM = "torch.mm(a, b)"
BMM = "torch.bmm(a, b)"
CONV_F = "F.conv2d forward"
CONV_FB = "F.conv2d forward + backward"
SDPA_F = "scaled_dot_product_attention forward"
SDPA_FB = "scaled_dot_product_attention forward + backward"
ELEMENTWISE = ("x + y", "x * y", "F.silu(x)", "torch.exp(x)", "F.gelu(x, approximate='tanh')", "x.to(other dtype)",
               "F.dropout(x, 0.1)", "x.clone()")
# Elementwise calls with an operand that does not lie as the output does (broadcast over it, or a
# strided view): PyTorch's CUDA kernels take them with its generic kernel, which computes each
# operand's offset from the element's index. The case's "other" is y's shape; a chunk is x's half
# of a tensor twice as wide (a fused projection's chunk(2, -1)).
STRIDED_ELEMENTWISE = ("x + y, y broadcast", "x * y, y broadcast", "F.silu(x), x a chunk of a wider tensor")
REDUCTION = ("x.sum()", "x.sum(-1)")
ROWWISE = ("torch.softmax(x, -1)", "torch.softmax(x, -1) forward + backward", "F.layer_norm(x, (cols,), w) forward",
           "F.layer_norm(x, (cols,), w) forward + backward", "x.contiguous() of x.t()", "torch.cat((x, x), -1)",
           "F.cross_entropy(logits, y) forward + backward")
EMBEDDING = "F.embedding(idx, w) forward + backward"
# What a vision step runs besides its matrix products (NCHW, or channels_last where a case says).
BATCH_NORM = ("F.batch_norm(x, training=True) forward", "F.batch_norm(x, training=True) forward + backward")
MAX_POOL = ("F.max_pool2d(x, 3, 2, 1) forward", "F.max_pool2d(x, 3, 2, 1) forward + backward")
COLUMN_SUM = "x.sum(0)"  # (a bias's gradient)
# A stack of recurrent layers (batch first), forward, or forward + backward to the input and the weights
RECURRENT = ("nn.LSTM forward", "nn.LSTM forward + backward", "nn.GRU forward + backward")
ADAMW = ("AdamW step (foreach)", "AdamW step (fused)", "AdamW step (for-loop)")
HOST_LINK = ("device.copy_(host), host pinned", "device.copy_(host), host pageable",
             "host.copy_(device), host pinned", "host.copy_(device), host pageable")
LAUNCH_HOST = "x.add_(1) on a 1-element tensor in a Python loop: host seconds per call"
# An optimizer step whose kernels take no time: what torch.optim's Python adds to its operators' dispatch.
OPTIMIZER_HOST = "AdamW step (foreach) over 1-element tensors in a Python loop: host seconds per call"
# A chain of tiny operators that autograd records, then its backward: what the autograd engine adds.
AUTOGRAD_HOST = "y = y * 1.0001 on a 0-d tensor that requires grad, forward then backward, in a Python loop: host seconds per call"
# A model's own Python: nn.Module's call machinery and two small transformer blocks' forward, their
# backward, on a batch so small its kernels take next to nothing. What is left besides the operators'
# dispatch and autograd's nodes is the Python, priced a line (the profile's host_python_line).
PYTHON_HOST = ("two transformer blocks of torch.nn modules on a [1, 2, 8] batch, forward + backward, "
               "in a Python loop: host seconds per call")
HOST_CALLS = (LAUNCH_HOST, OPTIMIZER_HOST, AUTOGRAD_HOST, PYTHON_HOST)


def gpu_cases() -> list[dict]:
    cases = []
    for n in (256, 1024, 2048, 4096, 8192):
        cases.append(dict(kind="gemm", call=GEMM, dtype="bfloat16", m=n, n=n, k=n))
    for m, n, k in ((8192, 4096, 4096), (8192, 14336, 4096), (8192, 4096, 14336), (4096, 4096, 65536),
                    (16, 4096, 4096), (128, 8192, 8192), (2048, 2048, 32768), (1024, 50304, 768),
                    (8192, 2304, 768), (4096, 11008, 4096), (512, 4096, 4096), (8192, 1024, 4096)):
        cases.append(dict(kind="gemm", call=GEMM, dtype="bfloat16", m=m, n=n, k=k))
    cases.append(dict(kind="gemm", call=GEMM, dtype="float16", m=4096, n=4096, k=4096))
    for tf32 in (False, True):
        cases.append(dict(kind="gemm", call=GEMM, dtype="float32", tf32=tf32, m=4096, n=4096, k=4096))
    for batch, m, n, k in ((64, 2048, 128, 2048), (64, 2048, 2048, 128), (512, 128, 128, 128)):
        cases.append(dict(kind="gemm", call=BMM, dtype="bfloat16", batch=batch, m=m, n=n, k=k))
    for inp, w, stride, pad in (([64, 64, 56, 56], [64, 64, 3, 3], 1, 1), ([64, 256, 56, 56], [64, 256, 1, 1], 1, 0),
                                ([64, 512, 7, 7], [512, 512, 3, 3], 1, 1), ([64, 3, 224, 224], [64, 3, 7, 7], 2, 3)):
        for call in (CONV_F, CONV_FB):
            cases.append(dict(kind="gemm", call=call, dtype="bfloat16", input=inp, weight=w, stride=stride, padding=pad))
    for seq in (512, 2048, 8192, 16384):
        for backend in ("default", "flash"):
            for causal in (False, True):
                for call in (SDPA_F, SDPA_FB):
                    cases.append(dict(kind="attention", call=call, backend=backend, dtype="bfloat16",
                                      batch=16384 // seq, heads=16, kv_heads=16, seq=seq, head_dim=128, causal=causal))
    for seq, hd, heads, kv in ((4096, 64, 32, 32), (4096, 128, 32, 8)):
        for call in (SDPA_F, SDPA_FB):
            cases.append(dict(kind="attention", call=call, backend="default", dtype="bfloat16", batch=4, heads=heads,
                              kv_heads=kv, seq=seq, head_dim=hd, causal=True))
    for numel in (1 << 16, 1 << 20, 1 << 24, 1 << 27):
        for dtype in ("bfloat16", "float32"):
            for call in ELEMENTWISE + ("x.sum()",):
                cases.append(dict(kind="memory-bound", call=call, dtype=dtype, numel=numel))
    for dtype in ("bfloat16", "float32"):
        for shape, other in (([8192, 2048], [8192, 1]), ([8192, 4096], [4096]), ([16384, 4096], [16384, 1])):
            cases.append(dict(kind="memory-bound", call=STRIDED_ELEMENTWISE[1], dtype=dtype, shape=shape, other=other))
        for shape in ([8192, 2048], [8192, 5632], [16384, 5632]):
            cases.append(dict(kind="memory-bound", call=STRIDED_ELEMENTWISE[2], dtype=dtype, shape=shape))
    for shape in ([8192, 4096], [16384, 8192], [4096, 32768]):
        for call in ("x.sum(-1)",) + ROWWISE[:-1]:
            cases.append(dict(kind="memory-bound", call=call, dtype="bfloat16", shape=shape))
    for shape in ([8192, 32000], [4096, 128256]):
        cases.append(dict(kind="memory-bound", call=ROWWISE[-1], dtype="float32", shape=shape))
    for shape in ([32000, 4096], [128256, 4096]):
        cases.append(dict(kind="memory-bound", call=EMBEDDING, dtype="bfloat16", shape=shape, tokens=8192))
    for tensors, width in ((148, 768), (98, 2048)):
        for call in ADAMW:
            cases.append(dict(kind="optimizer", call=call, tensors=tensors, width=width))
    for call in HOST_LINK:
        cases.append(dict(kind="host link", call=call, bytes=1 << 28))
    cases += vision_cases()
    cases += recurrent_cases()
    cases.append(dict(kind="launch", call=LAUNCH_HOST))
    cases.append(dict(kind="launch", call=OPTIMIZER_HOST, tensors=24))
    cases.append(dict(kind="launch", call=AUTOGRAD_HOST, ops=16))
    cases.append(dict(kind="launch", call=PYTHON_HOST))
    return cases


def vision_cases() -> list[dict]:
    """Convolutional networks' and small transformers' kinds: batch norm, pooling, convolutions with
    few input channels or channels_last, column sums, float32 norms, attention at short sequences."""
    cases = []
    for shape, fmt in (([32, 64, 112, 112], None), ([128, 128, 28, 28], None), ([64, 256, 28, 28], None),
                       ([256, 512, 7, 7], None), ([64, 128, 56, 56], "channels_last")):
        for call in BATCH_NORM:
            cases.append(dict(kind="memory-bound", call=call, dtype="bfloat16", shape=shape,
                              **({"memory_format": fmt} if fmt else {})))
    for shape in ([32, 64, 112, 112], [64, 128, 56, 56]):
        for call in MAX_POOL:
            cases.append(dict(kind="memory-bound", call=call, dtype="bfloat16", shape=shape))
    for shape in ([25088, 768], [8192, 3072], [65536, 256]):
        cases.append(dict(kind="memory-bound", call=COLUMN_SUM, dtype="bfloat16", shape=shape))
    # (float32, as autocast leaves a norm: short rows tell a block's time a row from the bytes' time)
    for shape in ([25088, 768], [16384, 1024], [25088, 384], [8192, 768]):
        for call in (ROWWISE[2], ROWWISE[3]):
            cases.append(dict(kind="memory-bound", call=call, dtype="float32", shape=shape))
    for inp, w, stride, pad, fmt in (([64, 3, 224, 224], [768, 3, 16, 16], 16, 0, None),
                                     ([64, 3, 112, 112], [32, 3, 3, 3], 2, 1, None),
                                     ([32, 128, 28, 28], [128, 128, 3, 3], 1, 1, None),
                                     ([128, 256, 14, 14], [256, 256, 3, 3], 1, 1, None),
                                     ([64, 64, 56, 56], [64, 64, 3, 3], 1, 1, "channels_last"),
                                     ([32, 128, 28, 28], [128, 128, 3, 3], 1, 1, "channels_last")):
        for call in (CONV_F, CONV_FB):
            cases.append(dict(kind="gemm", call=call, dtype="bfloat16", input=inp, weight=w, stride=stride,
                              padding=pad, **({"memory_format": fmt} if fmt else {})))
    for batch, heads, seq in ((64, 12, 256), (32, 16, 128), (256, 8, 197)):
        for call in (SDPA_F, SDPA_FB):
            cases.append(dict(kind="attention", call=call, backend="default", dtype="bfloat16", batch=batch,
                              heads=heads, kv_heads=heads, seq=seq, head_dim=64, causal=False))
    return cases


def recurrent_cases() -> list[dict]:
    """nn.LSTM and nn.GRU stacks: on a GPU, cuDNN's kernels a time step (simhpu prices them as such,
    csrc/simclock/recurrent_layers.cpp), the host's launches included."""
    cases = []
    for steps, batch, width, layers in ((256, 16, 1024, 2), (128, 64, 512, 1), (64, 128, 256, 2)):
        for call in RECURRENT:
            cases.append(dict(kind="recurrent", call=call, dtype="bfloat16", steps=steps, batch=batch, input=width,
                              hidden=width, layers=layers))
    return cases


def cpu_cases() -> list[dict]:
    cases = []
    for m, n, k in ((64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (32, 512, 512),
                    (512, 2048, 128), (128, 128, 2048), (1024, 256, 1024)):
        cases.append(dict(kind="gemm", call=GEMM, dtype="float32", m=m, n=n, k=k))
    cases.append(dict(kind="gemm", call=GEMM, dtype="bfloat16", m=256, n=256, k=256))
    cases.append(dict(kind="gemm", call=BMM, dtype="float32", batch=32, m=64, n=64, k=64))
    for inp, w, stride, pad in (([8, 16, 32, 32], [16, 16, 3, 3], 1, 1), ([8, 3, 64, 64], [16, 3, 7, 7], 2, 3),
                                ([8, 16, 8, 8], [16, 16, 3, 3], 1, 1)):  # (the last: a call's fixed time)
        for call in (CONV_F, CONV_FB):
            cases.append(dict(kind="gemm", call=call, dtype="float32", input=inp, weight=w, stride=stride, padding=pad))
    for seq in (64, 256):
        for causal in (False, True):
            for call in (SDPA_F, SDPA_FB):
                cases.append(dict(kind="attention", call=call, backend="default", dtype="float32",
                                  batch=2, heads=4, kv_heads=4, seq=seq, head_dim=32, causal=causal))
    for numel in (1 << 10, 1 << 16, 1 << 20, 1 << 22):
        for call in ELEMENTWISE + ("x.sum()",):
            cases.append(dict(kind="memory-bound", call=call, dtype="float32", numel=numel))
    for shape, other in (([256, 1024], [256, 1]), ([1024, 1024], [1024])):
        cases.append(dict(kind="memory-bound", call=STRIDED_ELEMENTWISE[1], dtype="float32", shape=shape, other=other))
        cases.append(dict(kind="memory-bound", call=STRIDED_ELEMENTWISE[2], dtype="float32", shape=shape))
    for shape in ([32, 128], [256, 512], [1024, 1024]):  # (the smallest: a row-wise kernel's least time)
        for call in ("x.sum(-1)",) + ROWWISE[:-1]:
            cases.append(dict(kind="memory-bound", call=call, dtype="float32", shape=shape))
        cases.append(dict(kind="memory-bound", call=ROWWISE[-1], dtype="float32", shape=shape))
    # (a CPU's pooling and batch norm are compute-bound loops: several times a copy's time an element)
    for shape in ([4, 16, 16, 16], [8, 16, 32, 32], [8, 32, 32, 32]):
        for call in BATCH_NORM + MAX_POOL:
            cases.append(dict(kind="memory-bound", call=call, dtype="float32", shape=shape))
    cases.append(dict(kind="memory-bound", call=EMBEDDING, dtype="float32", shape=[4096, 256], tokens=512))
    for call in ADAMW:
        cases.append(dict(kind="optimizer", call=call, tensors=24, width=128))
    cases.append(dict(kind="launch", call=LAUNCH_HOST))
    cases.append(dict(kind="launch", call=OPTIMIZER_HOST, tensors=24))
    cases.append(dict(kind="launch", call=AUTOGRAD_HOST, ops=16))
    cases.append(dict(kind="launch", call=PYTHON_HOST))
    return cases


# ----------------------------------------------------------------------------------------
# Building a case's call: a function of no arguments that makes the call once, on `device`.
# ----------------------------------------------------------------------------------------

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def _randn(*shape, device, dtype, grad=False):
    t = torch.randn(*shape, device=device, dtype=dtype)
    return t.requires_grad_(grad)


def build(case: dict, device) -> callable:
    """The call `case` describes, on `device`: tensors made, a function that makes the call once."""
    dtype = DTYPES.get(case.get("dtype", "float32"), torch.float32)
    call = case["call"]
    kind = case["kind"]
    if kind == "gemm" and call in (GEMM, BMM):
        lead = (case["batch"],) if call == BMM else ()
        a = _randn(*lead, case["m"], case["k"], device=device, dtype=dtype)
        b = _randn(*lead, case["k"], case["n"], device=device, dtype=dtype)
        op = torch.bmm if call == BMM else torch.mm
        return lambda: op(a, b)
    if kind == "gemm":
        x = _randn(*case["input"], device=device, dtype=dtype)
        w = _randn(*case["weight"], device=device, dtype=dtype)
        if case.get("memory_format") == "channels_last":
            x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
        x, w = x.requires_grad_(call == CONV_FB), w.requires_grad_(call == CONV_FB)
        if call == CONV_F:
            return lambda: F.conv2d(x, w, stride=case["stride"], padding=case["padding"])
        out = F.conv2d(x, w, stride=case["stride"], padding=case["padding"])
        g = torch.randn_like(out)
        return lambda: torch.autograd.grad(F.conv2d(x, w, stride=case["stride"], padding=case["padding"]), (x, w), g)
    if kind == "attention":
        backward = call == SDPA_FB
        q = _randn(case["batch"], case["heads"], case["seq"], case["head_dim"], device=device, dtype=dtype, grad=backward)
        k, v = (_randn(case["batch"], case["kv_heads"], case["seq"], case["head_dim"], device=device, dtype=dtype,
                       grad=backward) for _ in range(2))
        gqa = case["kv_heads"] != case["heads"]

        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=case["causal"], enable_gqa=gqa)
        if not backward:
            return forward
        g = torch.randn_like(q)
        return lambda: torch.autograd.grad(forward(), (q, k, v), g)
    if kind == "memory-bound":
        return _memory_bound(case, device, dtype)
    if kind == "recurrent":
        layer = torch.nn.GRU if call.startswith("nn.GRU") else torch.nn.LSTM
        rnn = layer(case["input"], case["hidden"], num_layers=case["layers"], batch_first=True).to(device, dtype)
        backward = call.endswith("forward + backward")
        x = _randn(case["batch"], case["steps"], case["input"], device=device, dtype=dtype, grad=backward)
        if not backward:
            return lambda: rnn(x)[0]
        g = torch.randn_like(rnn(x)[0])
        return lambda: torch.autograd.grad(rnn(x)[0], (x, *rnn.parameters()), g)
    if kind == "optimizer":
        return _adamw(case, device)
    if kind == "host link":
        n = case["bytes"]
        on_device = torch.empty(n, dtype=torch.uint8, device=device)
        pinned = "pinned" in call and torch.device(device).type != "cpu"
        host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
        if call.startswith("device.copy_"):
            return lambda: on_device.copy_(host, non_blocking=True)
        return lambda: host.copy_(on_device, non_blocking=True)
    if kind == "launch" and call == AUTOGRAD_HOST:
        x = torch.ones((), device=device, requires_grad=True)

        def forward_backward():
            y = x
            for _ in range(case["ops"]):
                y = y * 1.0001
            y.backward()
        return forward_backward
    if kind == "launch" and call == PYTHON_HOST:
        return _python_host(device)
    if kind == "launch" and call == OPTIMIZER_HOST:
        params = [torch.zeros(1, device=device, requires_grad=True) for _ in range(case["tensors"])]
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer = torch.optim.AdamW(params, lr=1e-3, foreach=True)
        # (called from here, as the part's loop called it; its Python is priced a tensor, not a line)
        return lambda: optimizer.step()
    if kind == "launch":
        x = torch.zeros(1, device=device)
        return lambda: x.add_(1)
    raise ValueError(f"part_measure: no way to build a case of kind {kind!r} and call {call!r}")


# At most this many copies of a call's operands: a call too small for them to pass the cache is one
# whose operands a step would find cached too (the output of the operator just before it).
MOST_COPIES = 64


def build_cold(case: dict, device) -> callable:
    """`build`, with the call's operands rotated through copies that together exceed twice the
    CPU's last-level cache: each call finds its operands in memory. A call timed again and again on
    the same tensors reads them from the cache, at up to twice the bandwidth of memory, and a
    GEMM's from the core's own cache (a [512, 512] x [512, 128] product 15-20 % faster than in a
    training step, where other operators ran between two of its calls). A launch's rows are not
    rotated: their one-element tensors are the host's data."""
    fn = build(case, device)
    if case["kind"] in ("launch", "host link"):
        return fn
    fn()  # (an optimizer makes its state at its first step)
    held = bytes_held(fn)
    if held == 0:
        return fn  # (nothing of its own to read)
    copies = min(MOST_COPIES, math.ceil(2 * last_level_cache_bytes() / held))
    if copies <= 1:
        return fn
    calls = itertools.cycle([fn] + [build(dict(case), device) for _ in range(copies - 1)])

    def rotating():
        return next(calls)()
    rotating.note = f"its operands rotated through {copies} copies ({copies * held / 2**20:.1f} MB)"
    return rotating


def bytes_held(fn) -> int:
    """The bytes of the tensors a built call holds: its closure's tensors and their gradients, and
    an optimizer's parameters, gradients and state (`optimizer.step` bound to it)."""
    seen: set[int] = set()

    def held(obj) -> int:
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() in seen:
                return 0
            seen.add(storage.data_ptr())
            return storage.nbytes() + (held(obj.grad) if obj.grad is not None else 0)
        if isinstance(obj, (list, tuple)):
            return sum(held(o) for o in obj)
        if isinstance(obj, dict):
            return sum(held(o) for o in obj.values())
        if isinstance(obj, torch.optim.Optimizer):
            return sum(held(g["params"]) for g in obj.param_groups) + sum(held(s) for s in obj.state.values())
        if getattr(obj, "__self__", None) is not None and getattr(obj, "__func__", None) is not None:
            return held(obj.__self__)  # (a bound method: its object's tensors)
        if callable(obj) and getattr(obj, "__closure__", None):
            return sum(held(cell.cell_contents) for cell in obj.__closure__ if _cell_filled(cell))
        return 0
    return held(fn)


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # (a closure's variable not yet assigned)
        return False
    return True


def last_level_cache_bytes() -> int:
    """The largest cache of the CPU this runs on, from Linux's sysfs; 32 MB where it does not say."""
    sizes = []
    for path in pathlib.Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = path.read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text[:-1] if text[-1:] in "KMG" else text
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=32 << 20)


class _Block(torch.nn.Module):
    """A pre-norm transformer block as models write one: attention, then an MLP, each a residual."""

    def __init__(self, width: int):
        super().__init__()
        self.attention_norm, self.mlp_norm = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.out = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width), torch.nn.Dropout(0.0))

    def forward(self, x):
        q, k, v = self.qkv(self.attention_norm(x)).chunk(3, dim=-1)
        x = x + self.out(F.scaled_dot_product_attention(q, k, v))
        return x + self.mlp(self.mlp_norm(x))


def _python_host(device) -> callable:
    torch.manual_seed(0)
    model = torch.nn.Sequential(_Block(8), _Block(8)).to(device)
    batch = torch.randn(1, 2, 8, device=device)

    def forward_backward():
        model.zero_grad(set_to_none=True)
        model(batch).sum().backward()
    return forward_backward


def _memory_bound(case: dict, device, dtype) -> callable:
    call = case["call"]
    shape = case.get("shape") or [case["numel"]]
    if call == EMBEDDING:
        w = _randn(*shape, device=device, dtype=dtype, grad=True)
        idx = torch.randint(0, shape[0], (case["tokens"],), device=device)
        g = torch.randn(case["tokens"], shape[1], device=device, dtype=dtype)
        return lambda: torch.autograd.grad(F.embedding(idx, w), (w,), g)
    if call == ROWWISE[-1]:  # cross-entropy forward + backward
        logits = _randn(*shape, device=device, dtype=dtype, grad=True)
        y = torch.randint(0, shape[1], (shape[0],), device=device)
        return lambda: torch.autograd.grad(F.cross_entropy(logits, y), (logits,))
    if call in STRIDED_ELEMENTWISE[:2]:
        x, y = _randn(*shape, device=device, dtype=dtype), _randn(*case["other"], device=device, dtype=dtype)
        return (lambda: x + y) if call.startswith("x + y") else (lambda: x * y)
    if call == STRIDED_ELEMENTWISE[2]:
        x = _randn(*shape[:-1], 2 * shape[-1], device=device, dtype=dtype).chunk(2, -1)[0]
        return lambda: F.silu(x)
    backward = "forward + backward" in call
    x = _randn(*shape, device=device, dtype=dtype)
    if case.get("memory_format") == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_(backward)
    if call in BATCH_NORM:
        # (as BatchNorm2d under autocast: float32 weights and statistics, the activations' dtype)
        weight, bias = (torch.ones(shape[1], device=device, requires_grad=backward) for _ in range(2))
        mean, var = torch.zeros(shape[1], device=device), torch.ones(shape[1], device=device)

        def batch_norm():
            return F.batch_norm(x, mean, var, weight, bias, training=True)
        if not backward:
            return batch_norm
        g = torch.randn_like(x)
        return lambda: torch.autograd.grad(batch_norm(), (x, weight, bias), g)
    if call in MAX_POOL:
        if not backward:
            return lambda: F.max_pool2d(x, 3, 2, 1)
        g = torch.randn_like(F.max_pool2d(x.detach(), 3, 2, 1))
        return lambda: torch.autograd.grad(F.max_pool2d(x, 3, 2, 1), (x,), g)
    y = torch.randn(*shape, device=device, dtype=dtype)
    other = torch.float32 if dtype != torch.float32 else torch.bfloat16
    if call.startswith("F.layer_norm"):
        w = _randn(shape[-1], device=device, dtype=dtype, grad=backward)
        if not backward:
            return lambda: F.layer_norm(x, (shape[-1],), w)
        g = torch.randn_like(x)
        return lambda: torch.autograd.grad(F.layer_norm(x, (shape[-1],), w), (x, w), g)
    if call.startswith("torch.softmax"):
        if not backward:
            return lambda: torch.softmax(x, -1)
        g = torch.randn_like(x)
        return lambda: torch.autograd.grad(torch.softmax(x, -1), (x,), g)
    table = {
        "x + y": lambda: x + y, "x * y": lambda: x * y, "F.silu(x)": lambda: F.silu(x),
        "torch.exp(x)": lambda: torch.exp(x), "F.gelu(x, approximate='tanh')": lambda: F.gelu(x, approximate="tanh"),
        "x.to(other dtype)": lambda: x.to(other), "F.dropout(x, 0.1)": lambda: F.dropout(x, 0.1),
        "x.clone()": lambda: x.clone(), "x.sum()": lambda: x.sum(), "x.sum(-1)": lambda: x.sum(-1), COLUMN_SUM: lambda: x.sum(0),
        "x.contiguous() of x.t()": lambda: x.t().contiguous(), "torch.cat((x, x), -1)": lambda: torch.cat((x, x), -1),
    }
    return table[call]


def adamw_shapes(tensors: int, width: int) -> list[tuple[int, ...]]:
    """A transformer's parameter set: per layer four square-ish matrices, two MLP ones and
    norms' vectors, `width` wide, until `tensors` tensors (embeddings first)."""
    shapes = [(8 * width * 8, width)]  # an embedding of 64 x width rows
    layer = [(width,), (width,), (3 * width, width), (3 * width,), (width, width), (width,), (width,), (width,),
             (4 * width, width), (4 * width,), (width, 4 * width), (width,)]
    while len(shapes) < tensors:
        shapes.append(layer[(len(shapes) - 1) % len(layer)])
    return shapes[:tensors]


def gpt2_124m_shapes() -> list[tuple[int, ...]]:
    """GPT-2 124M's 148 parameter tensors (vocabulary padded to 50,304; Conv1D weights as (in, out))."""
    layer = [(768,), (768,), (768, 2304), (2304,), (768, 768), (768,), (768,), (768,), (768, 3072), (3072,),
             (3072, 768), (768,)]
    return [(50304, 768), (1024, 768), *layer * 12, (768,), (768,)]


def llama_3_2_1b_shapes() -> list[tuple[int, ...]]:
    """Llama 3.2 1B's 147 parameter tensors (16 layers, grouped keys and values, an untied head)."""
    layer = [(2048, 2048), (512, 2048), (512, 2048), (2048, 2048), (8192, 2048), (8192, 2048), (2048, 8192),
             (2048,), (2048,)]
    return [(128256, 2048), *layer * 16, (2048,), (128256, 2048)]


PARAMETER_SETS = {"gpt2-124m": gpt2_124m_shapes, "llama-3.2-1b": llama_3_2_1b_shapes}


def _adamw(case: dict, device) -> callable:
    shapes = (PARAMETER_SETS[case["parameters"]]() if "parameters" in case
              else adamw_shapes(case["tensors"], case["width"]))
    params = [torch.randn(s, device=device).requires_grad_() for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p)
    call = case["call"]
    options = {"foreach": call.endswith("(foreach)"), "fused": call.endswith("(fused)")}
    if torch.device(device).type == "cpu" and options["fused"]:
        options = {"fused": True}
    optimizer = torch.optim.AdamW(params, lr=1e-3, **options)
    case["numel"] = sum(math.prod(s) for s in shapes)
    return optimizer.step


# ----------------------------------------------------------------------------------------
# Timing.
# ----------------------------------------------------------------------------------------

def _sync(device) -> None:
    kind = torch.device(device).type
    if kind == "cpu":
        return
    if hasattr(torch, "accelerator") and torch.accelerator.is_available():
        torch.accelerator.synchronize()
    else:
        getattr(torch, kind).synchronize()


@contextlib.contextmanager
def _settings(case: dict):
    """What the case asks of torch's global settings (TF32, an SDPA backend), restored after."""
    with contextlib.ExitStack() as stack:
        if "tf32" in case:
            # (the flag cuBLAS reads; it sets the legacy precision and cuBLAS's own together.
            # torch.set_float32_matmul_precision as well would leave the generic precision apart
            # from cuBLAS's once restored, and torch.get_float32_matmul_precision() raises on that)
            before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = case["tf32"]
            stack.callback(setattr, torch.backends.cuda.matmul, "allow_tf32", before)
        if case.get("backend") == "flash":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            stack.enter_context(sdpa_kernel(SDPBackend.FLASH_ATTENTION))
        yield


def time_call(fn, device, case: dict, budget: float = 2.0) -> tuple[float, str]:
    """(seconds of one call, how it was timed)."""
    kind = torch.device(device).type
    if case["kind"] == "launch":
        return _time_host_loop(fn, device, budget)
    if case["kind"] == "host link" and kind == "cpu":
        raise ValueError("a host link needs a device apart from the host")
    for _ in range(3):
        fn()
    _sync(device)
    if kind != "cuda":
        return _time_wall(fn, device, budget)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    once = start.elapsed_time(end) / 1e3
    graphable = case["kind"] not in ("optimizer", "host link")
    if once < 100e-6 and graphable:
        try:
            return _time_graph(fn), "device (CUDA graph of 20 calls, median of 5 replays)"
        except Exception:  # noqa: BLE001 - a call a graph cannot capture: timed with events
            torch.cuda.synchronize()
    repeats = max(5, min(20, int(budget / max(once, 1e-6))))
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times), f"device (CUDA events around one call, median of {repeats})"


def _time_graph(fn, calls: int = 20) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def _time_wall(fn, device, budget: float) -> tuple[float, str]:
    t0 = time.perf_counter()
    fn()
    _sync(device)
    once = time.perf_counter() - t0
    repeats = max(3, min(30, int(budget / max(once, 1e-7))))
    inner = max(1, int(1e-3 / max(once, 1e-7)))  # a call under a millisecond: several a timing
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync(device)
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times), f"wall clock around {inner} call(s) after synchronising, median of {repeats}"


def _kernel_names(fn, case: dict) -> dict[str, int]:
    """The CUDA kernels one call launches, by name (what the part ran: SDPA's backend, an
    optimizer's multi-tensor-apply launches), from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    try:
        with _settings(case), profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - the names are a note, not the measurement
        return {}
    names: dict[str, int] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            names[event.name[:120]] = names.get(event.name[:120], 0) + 1
    return names


def _time_host_loop(fn, device, budget: float) -> tuple[float, str]:
    t0 = time.perf_counter()
    for _ in range(20):
        fn()
    _sync(device)
    once = (time.perf_counter() - t0) / 20
    calls = max(20, min(2000, int(0.2 / max(once, 1e-7))))  # (about 0.2 s a timing)
    for _ in range(calls // 10):
        fn()
    _sync(device)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    _sync(device)
    return statistics.median(times), f"host wall clock over {calls} calls in a Python loop, median of 5"


# ----------------------------------------------------------------------------------------
# Whole training steps (the model zoo of torch_simhpu/model_zoo.py), timed end to end.
# ----------------------------------------------------------------------------------------

def step_times(step, device, repeats: int = 10) -> list[float]:
    """Each of `repeats` eager steps' wall time, after three to warm up."""
    for _ in range(3):
        step()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return times


def time_step(step, device, repeats: int = 10) -> tuple[float, str]:
    times = step_times(step, device, repeats)
    return statistics.median(times), f"wall clock around one eager step after synchronising, median of {repeats}"


def _load_zoo():
    try:
        from torch_simhpu import model_zoo
    except ImportError:  # run by path, without the package (its extension not built for this torch)
        import importlib.util
        spec = importlib.util.spec_from_file_location("model_zoo", pathlib.Path(__file__).with_name("model_zoo.py"))
        model_zoo = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(model_zoo)
    return model_zoo


# ----------------------------------------------------------------------------------------

def part_description(device) -> dict:
    device = torch.device(device)
    out = {"device": str(device), "software": f"torch {torch.__version__}"}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        out.update(part=props.name, sms=props.multi_processor_count, memory=props.total_memory,
                   software=f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})")
    elif device.type == "cpu":
        import platform
        out.update(part=platform.processor() or platform.machine(), threads=torch.get_num_threads(),
                   heap="kept, as a caching allocator keeps it" if _heap_kept else "the C library's own")
    return out


_heap_kept = False


def keep_the_heap() -> bool:
    """For the rest of this process, the CPU as a part keeps the memory it freed, as a device's caching
    allocator does: glibc's heap is not trimmed and no allocation under 32 MB is mapped afresh (mallopt).
    Otherwise a training step's activations fault their pages in anew at every step (GPT-2's step at cpu
    scale: 527 faults, 3 ms of its 31 on a virtual machine), a cost of this OS, not of the part. The
    commands that measure the CPU call it (not measure(): a process that only prices is left as it is).
    False where the C library is not glibc."""
    global _heap_kept
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    trim_threshold, mmap_threshold = -1, -3  # (glibc's malloc.h: M_TRIM_THRESHOLD, M_MMAP_THRESHOLD)
    _heap_kept = bool(mallopt(trim_threshold, 1 << 30)) and bool(mallopt(mmap_threshold, 1 << 25))
    return _heap_kept


def measure(device: str, cases: list[dict], *, time_limit: float, log=print, steps: list[str] = (),
            zoo_scale: str | None = None) -> dict:
    """Times every case (and every named model zoo step) on `device` within `time_limit` seconds."""
    try:
        torch.empty(1, device=device)
    except Exception as error:  # noqa: BLE001 - named with the device, nothing measured
        raise ValueError(f"profile_part: torch has no usable device {device!r}: {str(error).splitlines()[0]}") from None
    began = time.monotonic()
    per_case = max(0.05, time_limit / max(len(cases) + 10 * len(steps), 1) / 3)
    rows, failures = [], []
    for case in cases:
        if time.monotonic() - began > time_limit:
            raise TimeoutError(f"profile_part: the measurements ran past {time_limit:.0f} s at {describe(case)}; "
                               "give more time (--time-limit) or fewer cases")
        case = dict(case)
        try:
            with _settings(case):
                fn = build_cold(case, device) if torch.device(device).type == "cpu" else build(case, device)
                seconds, how = time_call(fn, device, case, budget=per_case)
                if getattr(fn, "note", None):
                    how = f"{how}; {fn.note}"
        except Exception as error:  # noqa: BLE001 - a failed measurement is named with its call
            failures.append(f"{describe(case)}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
            log(f"  failed: {failures[-1]}")
            continue
        finally:
            fn = None
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
        case.update(seconds=seconds, timing=how)
        if torch.device(device).type == "cuda" and case["kind"] in ("attention", "optimizer", "recurrent"):
            case["kernels"] = _kernel_names(build(case, device), case)
        rows.append(case)
        log(f"  {seconds * 1e6:12.2f} us  {describe(case)}")
    if steps:
        zoo = _load_zoo()
        for name in steps:
            try:
                step = zoo.training_step(name, device, scale=zoo_scale or _zoo_scale(device))
                times = step_times(step, device)
            except Exception as error:  # noqa: BLE001
                failures.append(f"training step {name}: {type(error).__name__}: {str(error).splitlines()[0]}")
                log(f"  failed: {failures[-1]}")
                continue
            # (the least and the most of the ten with the median: a step moves with its host, and an
            # error inside that range is not one the profile can be held to)
            rows.append(dict(kind="step", call=f"eager training step of {name}", model=name,
                             scale=zoo_scale or _zoo_scale(device), seconds=statistics.median(times),
                             seconds_least=min(times), seconds_most=max(times),
                             timing=f"wall clock around one eager step after synchronising, median of {len(times)}",
                             autocast=torch.device(device).type != "cpu"))  # (model_zoo.training_step's default)
            log(f"  {statistics.median(times) * 1e3:12.3f} ms  training step {name} "
                f"({min(times) * 1e3:.3f}-{max(times) * 1e3:.3f} ms)")
            step = None
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
    out = part_description(device)
    out.update(measured=time.strftime("%Y-%m-%d"), seconds_taken=round(time.monotonic() - began, 1),
               method=__doc__.split("How a call is timed:")[1].strip(), rows=rows, failures=failures)
    return out


def _zoo_scale(device) -> str:
    return "cpu" if torch.device(device).type == "cpu" else "gpu"


def describe(case: dict) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in case.items()
                      if k not in ("kind", "call", "seconds", "seconds_least", "seconds_most", "timing"))
    return f"{case['call']} ({sizes})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Time the calls a device profile is fitted on, on a real part.")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--time-limit", type=float, default=480.0)
    parser.add_argument("--steps", default="", help="model zoo steps to time as well, comma-separated")
    parser.add_argument("--threads", type=int, help="the CPU's intra-op threads (torch.set_num_threads): "
                                                    "the part, when --device cpu")
    parser.add_argument("--cases", choices=("all", "vision", "recurrent"), default="all",
                        help="vision: only vision_cases() (batch norm, pooling, convolutions, short attention); "
                             "recurrent: only recurrent_cases() (LSTM and GRU stacks)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    cases = cpu_cases() if torch.device(args.device).type == "cpu" else gpu_cases()
    if torch.device(args.device).type == "cpu":
        keep_the_heap()
    if args.cases == "vision":
        cases = vision_cases()
    elif args.cases == "recurrent":
        cases = recurrent_cases()
    steps = [s for s in args.steps.split(",") if s]
    result = measure(args.device, cases, time_limit=args.time_limit, steps=steps)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=1)
    print(f"{len(result['rows'])} rows, {len(result['failures'])} failures, {result['seconds_taken']} s: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
