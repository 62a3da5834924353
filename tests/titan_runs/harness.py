"""torchtitan's own training entry point, run on simhpu and on the CPU from one seed checkpoint.

`python -m torchtitan.train` (torchtitan from its PyPI wheel, unchanged) is started by
torchrun in a working folder made here: the wheel ships neither its debug
configuration's tokenizer nor its test dataset, so a byte-level BPE tokenizer and a
small C4-shaped dataset are made from a fixed seed, and the Llama-3 debug
configuration is written as torchtitan's own debug_model.toml has it. On simhpu
nothing is passed to choose the device: torchtitan finds the PrivateUse1 device,
and simccl for it, by itself. The CPU runs go through cpu_reference.py.

Each run loads the same seed checkpoint (made once, on the CPU, with torchtitan's
--checkpoint.create_seed_checkpoint) and saves its model at the last step, so two
runs are compared by their logged losses and, exactly, by their final weights.
"""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CPU_REFERENCE = HERE / "cpu_reference.py"

# torchtitan's Llama-3 debug configuration (torchtitan/models/llama3/train_configs/debug_model.toml),
# without its profiling, metrics and float8 sections, which the tests do not use.
DEBUG_MODEL_TOML = """\
[job]
dump_folder = "./outputs"
description = "Llama 3 debug training"

[metrics]
log_freq = 1
enable_tensorboard = false

[model]
name = "llama3"
flavor = "debugmodel"
hf_assets_path = "./tests/assets/tokenizer"

[optimizer]
name = "AdamW"
lr = 8e-4
eps = 1e-8

[lr_scheduler]
warmup_steps = 2
decay_ratio = 0.8
decay_type = "linear"
min_lr_factor = 0.0

[training]
local_batch_size = 8
seq_len = 2048
max_norm = 1.0
steps = 10
dataset = "c4_test"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
fsdp_reshard_after_forward = "default"
tensor_parallel_degree = 1

[checkpoint]
enable = false
folder = "checkpoint"
interval = 10
last_save_model_only = false
export_dtype = "float32"

[activation_checkpoint]
mode = "selective"
selective_ac_option = "2"

[compile]
enable = false
components = ["model", "loss"]
"""

# Small enough for a 2-core machine: a few steps of 2 x 256 tokens per rank.
SHORT_RUN = ("--training.seq_len", "256", "--training.local_batch_size", "2")
STEP_LINE = re.compile(r"step:\s*(\d+)\s+loss:\s*([0-9.]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def make_workdir(root: Path, seed: int = 0, documents: int = 400, vocab_size: int = 2048,
                 reserved_to: int | None = None) -> Path:
    """A folder torchtitan's debug configuration runs in: tokenizer, dataset, configuration.

    reserved_to: the tokenizer's vocabulary is filled up to this size with reserved
    special tokens, as Llama 3's is (its 128,256 entries size the model's embedding
    and output layers; a BPE trained on this little text learns far fewer)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8)))
             for _ in range(600)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(40, 300))) + "." for _ in range(documents)]

    tokenizer_dir = root / "tests/assets/tokenizer"
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size - len(specials), special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    if reserved_to is not None:
        tokenizer.add_special_tokens([f"<|reserved_special_token_{i}|>"
                                      for i in range(reserved_to - tokenizer.get_vocab_size())])
    tokenizer.save(str(tokenizer_dir / "tokenizer.json"))
    (tokenizer_dir / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": specials[0], "eos_token": specials[1], "add_bos_token": True, "add_eos_token": True}))

    data_dir = root / "tests/assets/c4_test"
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "data.json").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (root / "debug_model.toml").write_text(DEBUG_MODEL_TOML)
    return root


@dataclass
class Run:
    device: str
    dump_folder: Path
    log: str
    losses: dict[int, float]  # step -> rank 0's logged loss (5 decimals)

    def checkpoint(self, step: int) -> Path:
        return self.dump_folder / "checkpoint" / f"step-{step}"

    def weights(self, step: int) -> dict:
        """The model's weights saved at `step` (a DCP checkpoint), as CPU tensors."""
        return read_checkpoint(self.checkpoint(step))


def torchtitan(workdir: Path, device: str, nproc: int, tag: str, *args: str, timeout: float = 900,
               env: dict | None = None) -> Run:
    """`torchrun --nproc-per-node N -m torchtitan.train` (device "simhpu") or its CPU reference."""
    if device not in ("simhpu", "cpu"):
        raise ValueError(f"device must be 'simhpu' or 'cpu', got {device!r}")
    dump = workdir / f"out-{tag}"
    entry = ["-m", "torchtitan.train"] if device == "simhpu" else [str(CPU_REFERENCE)]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               *entry, "--job.config_file", "debug_model.toml", "--job.dump_folder", str(dump), *args]
    environment = dict(os.environ, **(env or {}), TORCH_DEVICE_BACKEND_AUTOLOAD="1" if device == "simhpu" else "0")
    done = subprocess.run(command, cwd=workdir, env=environment, capture_output=True, text=True, timeout=timeout)
    log = ANSI.sub("", done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"torchtitan on {device} ({tag}) failed with status {done.returncode}:\n{log[-6000:]}")
    losses = {}
    for line in log.splitlines():
        match = STEP_LINE.search(line)
        if match:
            losses.setdefault(int(match.group(1)), float(match.group(2)))
    return Run(device, dump, log, losses)


def seed_checkpoint(workdir: Path) -> Path:
    """torchtitan's seed checkpoint of the debug model (step 0), made once on the CPU."""
    folder = workdir / "out-seed" / "checkpoint" / "step-0"
    if not folder.exists():
        torchtitan(workdir, "cpu", 1, "seed", "--checkpoint.enable", "--checkpoint.create_seed_checkpoint",
                   "--parallelism.data_parallel_shard_degree", "1", "--training.steps", "1")
    return folder


def train(workdir: Path, device: str, nproc: int, tag: str, steps: int, *args: str,
          shape: tuple[str, ...] = SHORT_RUN) -> Run:
    """`steps` steps from the seed checkpoint, the model saved at the last one (`shape`: the
    batch's; () keeps the configuration's own)."""
    return torchtitan(workdir, device, nproc, tag, *shape, "--training.steps", str(steps),
                      "--checkpoint.enable", "--checkpoint.initial_load_path", str(seed_checkpoint(workdir)),
                      "--checkpoint.interval", "1000", "--checkpoint.last_save_model_only",
                      "--debug.seed", "0", "--debug.deterministic", *args)


def train_resumed(workdir: Path, device: str, nproc: int, tag: str, steps: int, stop_at: int, *args: str) -> Run:
    """As train(), but stopped at step `stop_at` with a full checkpoint (model, optimizer, data
    loader), then resumed from it in a new run to step `steps`."""
    common = (*SHORT_RUN, "--checkpoint.enable", "--checkpoint.initial_load_path", str(seed_checkpoint(workdir)),
              "--checkpoint.interval", str(stop_at), "--debug.seed", "0", "--debug.deterministic", *args)
    torchtitan(workdir, device, nproc, tag, *common, "--training.steps", str(stop_at),
               "--checkpoint.no-last_save_model_only")
    return torchtitan(workdir, device, nproc, tag, *common, "--training.steps", str(steps),
                      "--checkpoint.last_save_model_only")


def read_checkpoint(folder: Path) -> dict:
    """A DCP checkpoint's tensors, loaded on the CPU in a fresh process (no device, no group)."""
    out = folder.parent / (folder.name + ".pt")
    script = ("import sys, torch\n"
              "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n"
              "dcp_to_torch_save(sys.argv[1], sys.argv[2])\n")
    subprocess.run([sys.executable, "-c", script, str(folder), str(out)], check=True,
                   env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"), capture_output=True)
    import torch

    state = torch.load(out, weights_only=False)
    return {name: value for name, value in _flatten(state) if isinstance(value, torch.Tensor)}


def _flatten(state, prefix=""):
    for key, value in state.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def weight_differences(a: dict, b: dict) -> dict[str, float]:
    """Per weight that is not bit-identical, the largest absolute difference."""
    if a.keys() != b.keys():
        raise AssertionError(f"the checkpoints hold different weights: {sorted(a.keys() ^ b.keys())}")
    return {name: (a[name].double() - b[name].double()).abs().max().item()
            for name in a if not a[name].equal(b[name])}
