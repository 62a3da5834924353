"""Fully sharded data parallel (FSDP2, `fully_shard`) training on simhpu, and a
sharded checkpoint with torch.distributed.checkpoint.

    torchrun --nproc-per-node 2 examples/fsdp2.py [--steps N] [--checkpoint DIR]

Each rank keeps a shard of every parameter and of AdamW's state; FSDP2
all-gathers a block's parameters before its forward and backward and
reduce-scatters its gradients after, over the "simccl" backend, on its own
streams. Rank 0 trains the same model from the same start on the whole batch on
the CPU and checks the losses and the weights. Then the sharded state (model and
optimizer) is saved with torch.distributed.checkpoint, loaded into a fresh model,
and one more step from each must agree.
"""
import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

import torch_simhpu  # noqa: F401  (registers the device and the simccl backend)


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def make_model(width: int = 32, depth: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(64, width), *[Block(width) for _ in range(depth)], nn.Linear(width, 64))


def batches(steps: int, batch: int, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        tokens = torch.randint(0, 64, (batch, 9), generator=generator)
        yield tokens[:, :-1], tokens[:, 1:]


def step(model, optimizer, x, y):
    logits = model(x)
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def train(model, optimizer, device, steps, batch, shard=slice(None), seed=1):
    return torch.stack([step(model, optimizer, x[shard].to(device), y[shard].to(device))
                        for x, y in batches(steps, batch, seed)])


def sharded(device) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = make_model().to(device)
    for block in model[1:-1]:
        fully_shard(block)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8, help="global batch, split across ranks")
    parser.add_argument("--checkpoint", default=None, help="folder for the sharded checkpoint (default: a temporary one)")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("simhpu", local_rank % torch.simhpu.device_count())
    torch.simhpu.set_device(device)
    dist.init_process_group(device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    per_rank = args.batch // world
    shard = slice(rank * per_rank, (rank + 1) * per_rank)

    model, optimizer = sharded(device)
    losses = train(model, optimizer, device, args.steps, args.batch, shard)
    dist.all_reduce(losses, op=dist.ReduceOp.AVG)
    full_weights = {name: p.full_tensor().cpu() for name, p in model.state_dict().items()}

    if rank == 0:
        reference = make_model()
        reference_losses = train(reference, torch.optim.AdamW(reference.parameters(), lr=1e-2), "cpu",
                                 args.steps, args.batch)
        torch.testing.assert_close(losses.cpu(), reference_losses, rtol=1e-4, atol=1e-5)
        # Adam divides by the gradient's running magnitude, which magnifies the
        # rounding of near-zero gradients (summed in another order here) a little.
        for name, q in reference.state_dict().items():
            torch.testing.assert_close(full_weights[name], q, rtol=1e-3, atol=1e-4,
                                       msg=lambda m, name=name: f"{name}: {m}")
        print(f"fsdp2 on {world} simhpu processes: losses {[round(v, 4) for v in losses.tolist()]} "
              "match one CPU process, and so do the weights")

    # A sharded checkpoint of model and optimizer, loaded into a fresh model.
    folder = args.checkpoint
    if folder is None:
        holder = [tempfile.mkdtemp(prefix="simhpu_dcp_") if rank == 0 else None]
        dist.broadcast_object_list(holder, src=0)
        folder = holder[0]
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder)

    restored, restored_optimizer = sharded(device)
    target_model, target_optim = get_state_dict(restored, restored_optimizer)
    state = {"model": target_model, "optim": target_optim}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(restored, restored_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    after = train(model, optimizer, device, 1, args.batch, shard, seed=2)
    after_restored = train(restored, restored_optimizer, device, 1, args.batch, shard, seed=2)
    torch.testing.assert_close(after_restored, after, rtol=0, atol=0)
    for (name, p), q in zip(model.state_dict().items(), restored.state_dict().values()):
        torch.testing.assert_close(q.full_tensor(), p.full_tensor(), rtol=0, atol=0,
                                   msg=lambda m, name=name: f"{name}: {m}")
    if rank == 0:
        print(f"dcp: the sharded checkpoint in {folder} restores model and optimizer; the next step agrees exactly")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
