"""Small, randomly initialised models in plain torch, and one eager training step of each.

They are what simulated time is held to as whole steps: the same step timed on a real part
(torch_simhpu/simulation/part_measure.py, torch alone) and priced on simhpu (benchmarks/step_prices.py).
Each model comes at two scales: "gpu" (the sizes people train a layer of at: a GPT-2 124M, a
Llama-shaped 8-layer model, a ViT-S, a BERT-base, a ResNet-18) and "cpu" (the same shapes,
small enough for a laptop-class host to step in a fraction of a second).

A step: zero_grad, forward and loss (under bfloat16 autocast on an accelerator, float32 on
the CPU), backward, AdamW (foreach) step.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MODELS = ("gpt", "llama", "vit", "bert", "resnet")
# Whether each transformer's attention is causal (the language models' decoders are; an encoder's
# and a vision transformer's are not).
CAUSAL = {"gpt": True, "llama": True, "bert": False, "vit": False}


class RMSNorm(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * self.weight


class Block(nn.Module):
    """A pre-norm transformer block: attention (SDPA, grouped keys and values when kv_heads < heads), then an MLP."""

    def __init__(self, width, heads, kv_heads, hidden, causal, llama):
        super().__init__()
        self.heads, self.kv_heads, self.causal = heads, kv_heads, causal
        self.head_dim = width // heads
        norm = RMSNorm if llama else nn.LayerNorm
        self.norm1, self.norm2 = norm(width), norm(width)
        self.qkv = nn.Linear(width, (heads + 2 * kv_heads) * self.head_dim, bias=not llama)
        self.proj = nn.Linear(width, width, bias=not llama)
        self.llama = llama
        if llama:
            self.gate_up = nn.Linear(width, 2 * hidden, bias=False)
        else:
            self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width, bias=not llama)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], -1)
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=self.kv_heads != self.heads)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        h = self.norm2(x)
        if self.llama:
            gate, up = self.gate_up(h).chunk(2, -1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(self.up(h), approximate="tanh")
        return x + self.down(h)


class LanguageModel(nn.Module):
    def __init__(self, vocab, width, layers, heads, kv_heads, hidden, seq, causal=True, llama=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = None if llama else nn.Parameter(torch.randn(seq, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, heads, kv_heads, hidden, causal, llama) for _ in range(layers))
        self.norm = RMSNorm(width) if llama else nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        if self.position is not None:
            x = x + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


class VisionTransformer(nn.Module):
    def __init__(self, image, patch, width, layers, heads, classes=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, width, patch, stride=patch)
        tokens = (image // patch) ** 2
        self.position = nn.Parameter(torch.randn(tokens, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, heads, heads, 4 * width, CAUSAL["vit"], False) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, images, labels):
        x = self.patch(images).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            x = block(x)
        return F.cross_entropy(self.head(self.norm(x).mean(1)).float(), labels)


class BasicBlock(nn.Module):
    def __init__(self, inp, out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.shortcut = None
        if stride != 1 or inp != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    def __init__(self, widths, blocks, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, inp = [], widths[0]
        for i, w in enumerate(widths):
            for j in range(blocks):
                layers.append(BasicBlock(inp, w, 2 if j == 0 and i > 0 else 1))
                inp = w
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(inp, classes)

    def forward(self, images, labels):
        x = self.layers(self.stem(images))
        return F.cross_entropy(self.head(x.mean((2, 3))).float(), labels)


# name -> scale -> (model constructor, batch maker)
def _config(name: str, scale: str):
    gpu = scale == "gpu"
    if name == "gpt":
        vocab, seq, batch = (50304, 1024, 8) if gpu else (512, 64, 8)
        model = LanguageModel(vocab, 768 if gpu else 128, 12 if gpu else 2, 12 if gpu else 4, 12 if gpu else 4,
                              3072 if gpu else 512, seq, causal=CAUSAL[name])
        return model, ("tokens", vocab, batch, seq)
    if name == "llama":
        vocab, seq, batch = (32000, 2048, 4) if gpu else (512, 64, 4)
        model = LanguageModel(vocab, 2048 if gpu else 128, 8 if gpu else 2, 16 if gpu else 4, 4 if gpu else 2,
                              5632 if gpu else 384, seq, causal=CAUSAL[name], llama=True)
        return model, ("tokens", vocab, batch, seq)
    if name == "bert":
        vocab, seq, batch = (30528, 512, 16) if gpu else (512, 64, 8)
        model = LanguageModel(vocab, 768 if gpu else 128, 12 if gpu else 2, 12 if gpu else 4, 12 if gpu else 4,
                              3072 if gpu else 512, seq, causal=CAUSAL[name])
        return model, ("tokens", vocab, batch, seq)
    if name == "vit":
        image, batch = (224, 128) if gpu else (32, 8)
        model = VisionTransformer(image, 16 if gpu else 4, 384 if gpu else 96, 12 if gpu else 2, 6 if gpu else 4)
        return model, ("images", image, batch)
    if name == "resnet":
        image, batch = (224, 64) if gpu else (32, 8)
        model = ResNet([64, 128, 256, 512] if gpu else [16, 32, 64], 2 if gpu else 1)
        return model, ("images", image, batch)
    raise ValueError(f"model_zoo: no model {name!r} (there are: {', '.join(MODELS)})")


def model_and_batch(name: str, device, scale: str = "cpu"):
    """The model (float32 parameters) and its batch on `device`, from a fixed seed."""
    if scale not in ("cpu", "gpu"):
        raise ValueError(f"model_zoo: scale must be 'cpu' or 'gpu', got {scale!r}")
    torch.manual_seed(0)
    model, batch = _config(name, scale)
    generator = torch.Generator().manual_seed(1)
    if batch[0] == "tokens":
        _, vocab, n, seq = batch
        tokens = torch.randint(0, vocab, (n, seq + 1), generator=generator)
        inputs = (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    else:
        _, image, n = batch
        inputs = (torch.randn(n, 3, image, image, generator=generator), torch.randint(0, 1000, (n,), generator=generator))
    return model.to(device), tuple(t.to(device) for t in inputs)


def training_step(name: str, device, scale: str = "cpu", autocast: bool | None = None):
    """A function running one eager training step of model `name` on `device`; returns nothing
    (no host read of the loss: the step's time is the device's)."""
    model, inputs = model_and_batch(name, device, scale)
    device_type = torch.device(device).type
    if autocast is None:
        autocast = device_type != "cpu"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast):
            loss = model(*inputs)
        loss.backward()
        optimizer.step()
    return step


def parameters(name: str, scale: str = "cpu") -> int:
    model, _ = _config(name, scale)
    return sum(p.numel() for p in model.parameters())



