"""Data-parallel training on simhpu with DistributedDataParallel.

    torchrun --nproc-per-node 2 examples/ddp.py [--steps N]

Each process trains on its own simhpu device (local rank modulo the device
count) and its shard of every batch; DDP all-reduces gradients in buckets over
the "simccl" backend while backward runs. Rank 0 trains the same model from the
same start on the whole batch on the CPU, in one process, and checks that the
losses and the final weights match.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

import torch_simhpu  # noqa: F401  (registers the device and the simccl backend)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 10),
    )


def batches(steps: int, batch: int):
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        yield torch.randn(batch, 3, 16, 16, generator=generator), torch.randint(0, 10, (batch,), generator=generator)


def train(model, device, steps, batch, shard=slice(None)):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches(steps, batch):
        x, y = x[shard].to(device), y[shard].to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16, help="global batch, split across ranks")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("simhpu", local_rank % torch.simhpu.device_count())
    torch.simhpu.set_device(device)
    dist.init_process_group(device_id=device)  # simccl: simhpu's default backend
    rank, world = dist.get_rank(), dist.get_world_size()
    assert args.batch % world == 0, "the global batch must split evenly across ranks"
    per_rank = args.batch // world

    # SyncBatchNorm: statistics over the whole batch, as the single process sees them.
    model = DistributedDataParallel(nn.SyncBatchNorm.convert_sync_batchnorm(make_model()).to(device),
                                    bucket_cap_mb=0.01)  # small buckets: several all-reduces per step
    losses = train(model, device, args.steps, args.batch, slice(rank * per_rank, (rank + 1) * per_rank))
    # The loss of the whole batch is the mean of the shards' losses.
    dist.all_reduce(losses, op=dist.ReduceOp.AVG)

    if rank == 0:
        reference = make_model()
        reference_losses = train(reference, "cpu", args.steps, args.batch)
        torch.testing.assert_close(losses.cpu(), reference_losses, rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(model.module.state_dict().items(), reference.state_dict().values()):
            torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
        print(f"ddp on {world} simhpu processes: losses {[round(v, 4) for v in losses.tolist()]} "
              "match one CPU process, and so do the weights")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
