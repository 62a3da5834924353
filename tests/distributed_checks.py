"""What each rank of a test process group runs (see rank_pool.py): every check
takes (rank, world, ...) and compares what simccl gives with what the same
inputs give on the CPU, computed locally from every rank's (deterministic) input."""
from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.testing import assert_close

import torch_simhpu  # noqa: F401


def device() -> torch.device:
    return torch.device("simhpu", torch.simhpu.current_device())


def init_default_group(rank, world):
    """As a user would: the rank's device, and simccl as simhpu's default backend."""
    dev = torch.device("simhpu", rank % torch.simhpu.device_count())
    torch.simhpu.set_device(dev)
    timeout = timedelta(seconds=float(os.environ.get("CHECK_GROUP_TIMEOUT", "60")))
    dist.init_process_group(device_id=dev, timeout=timeout)


def init_group_by_name(rank, world):
    """init_process_group(<CHECK_BACKEND>), e.g. "simccl" or "cpu:gloo,simhpu:simccl"."""
    torch.simhpu.set_device(rank % torch.simhpu.device_count())
    dist.init_process_group(os.environ["CHECK_BACKEND"], timeout=timedelta(seconds=60))


def cpu_and_device_tensors(rank, world):
    """One group, both kinds of tensor: simhpu ones to simccl, CPU ones to gloo."""
    for dev in (device(), torch.device("cpu")):
        x = torch.full((3,), float(rank + 1), device=dev)
        dist.all_reduce(x)
        assert x.device == dev
        assert_close(x.cpu(), torch.full((3,), float(sum(range(1, world + 1)))))
    return dist.get_backend()


def shutdown(rank, world):
    if dist.is_initialized():
        dist.destroy_process_group()


def rank_input(r, shape=(5, 3), dtype=torch.float32):
    """Rank r's input: different on every rank, known to all of them."""
    g = torch.Generator().manual_seed(100 + r)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g) + 0.5).to(dtype)
    return torch.randint(1, 16, shape, generator=g, dtype=torch.int64).to(dtype)


def everyone(world, **kwargs):
    return [rank_input(r, **kwargs) for r in range(world)]


def backend_in_use(rank, world):
    return dist.get_backend(), str(device()), dist.get_default_backend_for_device("simhpu")


def all_reduce_every_op(rank, world):
    R = dist.ReduceOp
    floats = everyone(world)
    ints = everyone(world, dtype=torch.int32)
    stack_f, stack_i = torch.stack(floats), torch.stack(ints)
    factor = torch.tensor(0.25, device=device())
    cases = [
        (R.SUM, floats, stack_f.sum(0)),
        (R.PRODUCT, floats, stack_f.prod(0)),
        (R.MIN, floats, stack_f.amin(0)),
        (R.MAX, floats, stack_f.amax(0)),
        (R.AVG, floats, stack_f.mean(0)),
        (dist._make_nccl_premul_sum(0.5), floats, stack_f.sum(0) * 0.5),
        (dist._make_nccl_premul_sum(factor), floats, stack_f.sum(0) * 0.25),
        (R.SUM, ints, stack_i.sum(0, dtype=torch.int32)),
        (R.BAND, ints, stack_i[0] & stack_i[1]),
        (R.BOR, ints, stack_i[0] | stack_i[1]),
        (R.BXOR, ints, stack_i[0] ^ stack_i[1]),
    ]
    for op, inputs, expected in cases:
        x = inputs[rank].to(device())
        dist.all_reduce(x, op=op)
        assert_close(x.cpu(), expected, msg=lambda m, op=op: f"all_reduce {op}: {m}")
    # Other dtypes, and a non-contiguous tensor (reduced in place where it is).
    for dtype in (torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.uint8):
        inputs = everyone(world, dtype=dtype)
        x = inputs[rank].to(device())
        dist.all_reduce(x)
        assert_close(x.cpu(), torch.stack(inputs).sum(0).to(dtype))
    # channels_last is as good as contiguous (reduced in the order it lies in memory).
    images = everyone(world, shape=(2, 3, 4, 5))
    x = images[rank].to(device()).contiguous(memory_format=torch.channels_last)
    dist.all_reduce(x)
    assert_close(x.cpu(), torch.stack(images).sum(0))


def broadcast_from_each_root(rank, world):
    inputs = everyone(world, shape=(1000,))
    for root in range(world):
        x = inputs[rank].to(device())
        dist.broadcast(x, src=root)
        assert_close(x.cpu(), inputs[root])
    objects = [{"rank": rank, "tensor": torch.arange(3)}]
    dist.broadcast_object_list(objects, src=1)
    assert objects[0]["rank"] == 1


def all_gather_forms(rank, world):
    inputs = everyone(world)
    x = inputs[rank].to(device())
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x)
    for got, want in zip(parts, inputs):
        assert_close(got.cpu(), want)
    flat = torch.empty(world * x.numel(), device=device())
    dist.all_gather_into_tensor(flat, x)
    assert_close(flat.cpu(), torch.cat([t.reshape(-1) for t in inputs]))
    stacked = torch.empty(world, *x.shape, device=device())  # the shape nn.SyncBatchNorm uses
    dist.all_gather_into_tensor(stacked, x)
    assert_close(stacked.cpu(), torch.stack(inputs))
    gathered = [None] * world
    dist.all_gather_object(gathered, ("rank", rank))
    assert gathered == [("rank", r) for r in range(world)]


def reduce_scatter_forms(rank, world):
    R = dist.ReduceOp
    inputs = everyone(world, shape=(world * 4, 3))
    total = torch.stack(inputs).sum(0)
    mine = total.chunk(world)[rank]
    for op, expected in [(R.SUM, mine), (R.AVG, mine / world), (R.MAX, torch.stack(inputs).amax(0).chunk(world)[rank]),
                         (dist._make_nccl_premul_sum(2.0), mine * 2)]:
        x = inputs[rank].to(device())
        out = torch.empty(4, 3, device=device())
        dist.reduce_scatter_tensor(out, x, op=op)
        assert_close(out.cpu(), expected, msg=lambda m, op=op: f"reduce_scatter_tensor {op}: {m}")
        assert_close(x.cpu(), inputs[rank], msg=lambda m: f"the input must be left as it was: {m}")
        out = torch.empty(4, 3, device=device())
        dist.reduce_scatter(out, list(x.chunk(world)), op=op)
        assert_close(out.cpu(), expected, msg=lambda m, op=op: f"reduce_scatter {op}: {m}")


def all_to_all_forms(rank, world):
    inputs = everyone(world, shape=(world * 3,))
    x = inputs[rank].to(device())
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    assert_close(out.cpu(), torch.cat([inputs[r].chunk(world)[rank] for r in range(world)]))
    # Uneven: rank r sends r + 1 + d elements to rank d.
    sends = [r_ + 1 + rank for r_ in range(world)]
    x = torch.arange(sum(sends), dtype=torch.float32) + 100 * rank
    receives = [rank + 1 + src for src in range(world)]
    out = torch.empty(sum(receives), device=device())
    dist.all_to_all_single(out, x.to(device()), output_split_sizes=receives, input_split_sizes=sends)
    expected = []
    for src in range(world):
        src_sends = [d + 1 + src for d in range(world)]
        start = sum(src_sends[:rank])
        expected.append(torch.arange(sum(src_sends), dtype=torch.float32)[start:start + src_sends[rank]] + 100 * src)
    assert_close(out.cpu(), torch.cat(expected))
    outs = [torch.empty(3, device=device()) for _ in range(world)]
    dist.all_to_all(outs, [t.to(device()) for t in inputs[rank].chunk(world)])
    for src in range(world):
        assert_close(outs[src].cpu(), inputs[src].chunk(world)[rank])


def gather_scatter_reduce(rank, world):
    inputs = everyone(world)
    x = inputs[rank].to(device())
    parts = [torch.empty_like(x) for _ in range(world)] if rank == 0 else None
    dist.gather(x, parts, dst=0)
    if rank == 0:
        for got, want in zip(parts, inputs):
            assert_close(got.cpu(), want)
    out = torch.empty_like(x)
    dist.scatter(out, [t.to(device()) for t in inputs] if rank == 1 else None, src=1)
    assert_close(out.cpu(), inputs[rank])
    y = inputs[rank].to(device())
    dist.reduce(y, dst=1, op=dist.ReduceOp.MAX)
    if rank == 1:
        assert_close(y.cpu(), torch.stack(inputs).amax(0))


def point_to_point(rank, world):
    peer = 1 - rank
    big = (1 << 20,)  # 4 MB: more than a socket buffer holds, so a send waits for its receive
    mine, theirs = rank_input(rank, shape=big), rank_input(peer, shape=big)
    # Both ranks send first, then receive: each send completes only when the
    # peer receives, so this works only if a send does not hold the stream.
    received = torch.empty(big, device=device())
    send = dist.isend(mine.to(device()), dst=peer)
    recv = dist.irecv(received, src=peer)
    send.wait()
    recv.wait()
    assert_close(received.cpu(), theirs)
    # Blocking forms, one direction then the other.
    t = torch.empty(7, device=device())
    for sender in (0, 1):
        if rank == sender:
            dist.send(torch.full((7,), float(sender), device=device()), dst=peer)
        else:
            dist.recv(t, src=sender)
            assert_close(t.cpu(), torch.full((7,), float(sender)))
    # batch_isend_irecv, the documented way to exchange.
    received = torch.empty(big, device=device())
    ops = [dist.P2POp(dist.isend, mine.to(device()), peer), dist.P2POp(dist.irecv, received, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert_close(received.cpu(), theirs)


def barrier_waits_for_every_rank(rank, world):
    if rank == 1:
        time.sleep(0.5)
    start = time.perf_counter()
    dist.barrier()
    return time.perf_counter() - start


def collective_orders_with_streams(rank, world):
    """The collective reads what the caller's stream queued before it, the host
    does not wait, and work.wait() makes the caller's stream (not the host) wait."""
    x = torch.zeros(1000, device=device())
    # Rank 1 is late: its stream is busy for 0.4 s before it writes its contribution.
    torch_simhpu._C._sleep_on_device(x, 400_000 if rank == 1 else 1000)
    x.add_(rank + 1)
    start = time.perf_counter()
    work = dist.all_reduce(x, async_op=True)
    launch_seconds = time.perf_counter() - start
    completed_at_launch = work.is_completed()
    work.wait()  # the current stream waits; the host goes on
    wait_seconds = time.perf_counter() - start
    # Queued behind the wait: without it, this copy would read x before the sum arrived.
    y = x.clone()
    assert_close(y.cpu(), torch.full((1000,), float(sum(range(1, world + 1)))))
    assert work.is_completed()
    return launch_seconds, wait_seconds, completed_at_launch


def wait_with_a_timeout_raises_then_waits(rank, world):
    """work.wait(timeout) waits on the host, and says so when the collective is late."""
    x = torch.ones(16, device=device())
    torch_simhpu._C._sleep_on_device(x, 600_000 if rank == 1 else 1000)  # rank 1 arrives 0.6 s late
    work = dist.all_reduce(x, async_op=True)
    if rank == 0:
        try:
            work.wait(timedelta(milliseconds=100))
        except RuntimeError as e:
            message = str(e)
        else:
            raise AssertionError("wait(timeout) returned before the peer arrived")
    else:
        message = None
    work.wait(timedelta(seconds=30))
    assert_close(x.cpu(), torch.full((16,), float(world)))
    return message


def skipped_collective_gives_up_its_turn(rank, world):
    """A collective whose input an earlier kernel failure left undefined never
    runs; it must not keep the group's later collectives waiting for its turn."""
    x = torch.ones(8, device=device())
    torch_simhpu._C._launch_failing_kernel(x)
    dist.all_reduce(x)  # skipped on both ranks: its input is undefined
    try:
        torch.simhpu.synchronize()
    except RuntimeError as e:
        message = str(e)
    else:
        raise AssertionError("the failure was not reported")
    torch.simhpu.synchronize()  # one device synchronisation reported every stream's failure
    y = torch.full((8,), float(rank + 1), device=device())
    dist.all_reduce(y)
    assert_close(y.cpu(), torch.full((8,), float(sum(range(1, world + 1)))))
    return message


def host_collective_follows_queued_device_collectives(rank, world):
    """An object collective (CPU tensors, run from the host) reaches the transport after the device
    collectives queued before it, on every rank: DCP's gather_object behind FSDP's reduce-scatters."""
    x = torch.full((1 << 16,), float(rank + 1), device=device())
    # Rank 0's stream is busy for 0.3 s: its all-reduces reach the transport late.
    torch_simhpu._C._sleep_on_device(x, 300_000 if rank == 0 else 1000)
    for _ in range(3):
        dist.all_reduce(x)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "elements": x.numel()})
    cpu = torch.full((5,), float(rank), dtype=torch.float64)
    dist.broadcast(cpu, src=1)
    assert gathered == [{"rank": r, "elements": 1 << 16} for r in range(world)], gathered
    assert_close(cpu, torch.full((5,), 1.0, dtype=torch.float64))
    total = float(sum(range(1, world + 1)))
    assert_close(x.cpu(), torch.full((1 << 16,), total * world * world))
    return True


def ddp_reports_device_times(rank, world):
    """DDP's runtime statistics come from the device timer (csrc/distributed/ddp_timer.cpp)."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    ddp = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                                      torch.nn.Linear(256, 8)).to(device()))
    ddp._set_ddp_runtime_logging_sample_rate(1)
    x = torch.randn(32, 64, device=device())
    for _ in range(3):
        ddp(x).sum().backward()
    data = ddp._get_ddp_logging_data()
    return {key: data.get(key, 0) for key in ("avg_forward_compute_time", "avg_backward_compute_time",
                                              "avg_backward_comm_time")}


def future_of_work(rank, world):
    x = torch.full((4,), float(rank + 1), device=device())
    fut = dist.all_reduce(x, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    assert_close(doubled.wait().cpu(), torch.full((4,), 2.0 * sum(range(1, world + 1))))


def two_devices_in_one_group(rank, world):
    """One process, collectives on two of its devices in turn: each reaches the
    transport in the order the program launched it, whichever stream runs it."""
    assert torch.simhpu.device_count() >= 2
    works, tensors, expected = [], [], []
    for i in range(6):
        dev = torch.device("simhpu", i % 2)
        t = torch.full((256,), float(i + rank), device=dev)
        if i % 2 == 1:
            torch_simhpu._C._sleep_on_device(t, 20_000)  # device 1's stream is slower
        works.append(dist.all_reduce(t, async_op=True))
        tensors.append(t)
        expected.append(sum(float(i + r) for r in range(world)))
    for work, t, want in zip(works, tensors, expected):
        work.wait()
        assert_close(t.cpu(), torch.full((256,), want))


def bad_inputs_raise_and_leave_the_group_usable(rank, world):
    messages = []

    def expect(fn, *fragments):
        try:
            fn()
        except (RuntimeError, ValueError) as e:
            text = str(e)
            assert all(f in text for f in fragments), f"{fragments} not in: {text}"
            messages.append(text.splitlines()[0])
        else:
            raise AssertionError(f"no error for {fragments}")

    d = device()
    expect(lambda: dist.all_gather_into_tensor(torch.empty(5, device=d), torch.ones(3, device=d)),
           "simccl all_gather_into_tensor", "world size (2) times 3 elements, got 5")
    expect(lambda: dist.reduce_scatter_tensor(torch.empty(2, device=d), torch.ones(4, 2, device=d).t()),
           "simccl reduce_scatter_tensor", "must be contiguous")
    expect(lambda: dist.all_reduce(torch.ones(4, 4, device=d)[:, :2]), "simccl all_reduce", "must be contiguous")
    expect(lambda: dist.all_gather([torch.empty(2, device=d), torch.empty(2)], torch.ones(2, device=d)),
           "simccl all_gather", "one device")
    expect(lambda: dist.all_to_all_single(torch.empty(4, device=d), torch.ones(4, device=d), [1, 1, 2], [2, 2]),
           "simccl all_to_all_single", "split sizes")
    expect(lambda: dist.all_gather_into_tensor(torch.empty(4, device=d), torch.ones(2, dtype=torch.int64, device=d)),
           "simccl all_gather_into_tensor", "dtypes differ")
    x = torch.ones(3, device=d)
    dist.all_reduce(x)
    assert_close(x.cpu(), torch.full((3,), float(world)))
    return messages


def mismatched_calls_fail_on_every_rank(rank, world):
    """Calls the ranks disagree on fail on every rank, at the next
    synchronisation (as any device kernel's failure), naming what differs; no
    output is left holding data the collective did not write; the group goes on."""
    d = device()
    messages = []

    def expect_failure(collective, *fragments, unwritten=None):
        collective()
        try:
            torch.simhpu.synchronize()
        except RuntimeError as e:
            text = str(e)
            assert all(f in text for f in fragments), f"{fragments} not in: {text}"
            messages.append(text)
        else:
            raise AssertionError(f"no failure for {fragments}")
        if unwritten is not None:  # reading it raises instead of returning what nobody wrote
            try:
                unwritten.cpu()
            except RuntimeError as e:
                assert "undefined" in str(e), str(e)
            else:
                raise AssertionError("the output of a failed collective was readable")

    x = torch.ones(6 if rank == 0 else 4, device=d)
    expect_failure(lambda: dist.all_reduce(x), f"simccl all_reduce on rank {rank} of 2 failed",
                   "elements: rank 0 6, rank 1 4", "no data was exchanged")
    y = torch.ones(3, dtype=torch.float32 if rank == 0 else torch.float64, device=d)
    expect_failure(lambda: dist.all_reduce(y), "dtype: rank 0 Float, rank 1 Double")
    gathered = torch.empty(world * (3 + rank), device=d)
    expect_failure(lambda: dist.all_gather_into_tensor(gathered, torch.ones(3 + rank, device=d)),
                   "simccl all_gather_into_tensor", "elements: rank 0 3, rank 1 4", unwritten=gathered)
    # (each on a tensor of its own: a failed collective leaves its tensors undefined)
    z = [torch.ones(3, device=d) for _ in range(3)]
    expect_failure(lambda: dist.all_reduce(z[0]) if rank == 0 else dist.broadcast(z[0], src=0),
                   "collective: rank 0 ALLREDUCE, rank 1 BROADCAST")
    expect_failure(lambda: dist.broadcast(z[1], src=rank), "root rank: rank 0 0, rank 1 1")
    expect_failure(lambda: dist.all_reduce(z[2], op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX),
                   "reduce op: rank 0 SUM, rank 1 MAX")
    assert all("Exception raised from" not in m for m in messages), messages[0]
    good = torch.ones(3, device=d)
    dist.all_reduce(good)
    assert_close(good.cpu(), torch.full((3,), float(world)))
    return messages


def sanitizer_finds_a_collective_output_used_before_wait(rank, world):
    """The sanitizer: a collective's output touched on the compute stream before
    work.wait() races with the collective on the communication stream; after
    wait() it does not."""
    x = torch.ones(4, device=device())
    with torch.simhpu.sanitizer.enabled("record"):
        work = dist.all_reduce(x, async_op=True)
        x.add_(1)  # [before wait]
        found = torch.simhpu.sanitizer.reports()
        torch.simhpu.sanitizer.clear_reports()
        work.wait()
        y = torch.ones(4, device=device())
        dist.all_reduce(y, async_op=True).wait()
        y.add_(1)  # after wait: ordered
        clean = torch.simhpu.sanitizer.reports()
        torch.simhpu.synchronize()
    assert len(found) == 1 and "all_reduce on simhpu" in found[0] and "stream 0" in found[0], found
    assert clean == [], clean
    return found[0]


def sanitizer_finds_a_gradient_bucket_read_before_its_all_reduce(rank, world):
    """DDP's pattern by hand: gradients flattened into one bucket, the bucket
    all-reduced asynchronously, the optimizer reading its views. Reading them
    before work.wait() races with the all-reduce; after wait() it does not."""
    torch.manual_seed(rank)
    params = [torch.randn(3, 4, device=device()), torch.randn(5, device=device())]
    grads = [torch.randn_like(p) for p in params]

    def step(wait_first):
        bucket = torch.cat([g.reshape(-1) for g in grads])  # on the compute stream
        work = dist.all_reduce(bucket, async_op=True)
        if wait_first:
            work.wait()
        views = bucket.split([g.numel() for g in grads])
        for p, view in zip(params, views):
            p.add_(view.view_as(p), alpha=-0.1)  # [the optimizer reads the bucket]
        if not wait_first:
            work.wait()

    with torch.simhpu.sanitizer.enabled("record"):
        step(wait_first=False)
        found = torch.simhpu.sanitizer.reports()
        torch.simhpu.sanitizer.clear_reports()
        step(wait_first=True)
        clean = torch.simhpu.sanitizer.reports()
        torch.simhpu.synchronize()
    assert found and all("all_reduce on simhpu" in m and "aten::add.out" in m for m in found), found
    assert clean == [], clean
    return found[0]


def capture_refuses_collectives(rank, world):
    x = torch.ones(3, device=device())
    graph = torch.simhpu.Graph()
    try:
        with torch.simhpu.graph(graph):
            dist.all_reduce(x)
    except RuntimeError as e:
        message = str(e)
    else:
        raise AssertionError("a collective was captured")
    dist.all_reduce(x)
    assert_close(x.cpu(), torch.full((3,), float(world)))
    return message


def ddp_step_matches_cpu(rank, world):
    from torch.nn.parallel import DistributedDataParallel

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))

    g = torch.Generator().manual_seed(5)
    data = [(torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)) for _ in range(3)]
    ddp = DistributedDataParallel(model().to(device()), bucket_cap_mb=0.0001)
    reference = model()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    shard = slice(rank * 4, rank * 4 + 4)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x[shard].to(device())), y[shard].to(device())).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    for p, q in zip(ddp.module.parameters(), reference.parameters()):
        assert_close(p.cpu(), q, rtol=1e-5, atol=1e-6)


def dtensor_redistribute(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("simhpu", (world,))
    full = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    sharded = distribute_tensor(full.to(device()), mesh, [Shard(0)])
    assert_close(sharded.to_local().cpu(), full.chunk(world)[rank])
    replicated = sharded.redistribute(mesh, [Replicate()])
    assert_close(replicated.to_local().cpu(), full)
    total = (sharded * 2).sum().full_tensor()
    assert_close(total.cpu(), full.sum() * 2)


def dtensor_random_init_draws_a_stream_per_shard(rank, world):
    """DTensor's random initialisation takes the device for CUDA-like (it has set_rng_state) and
    moves the generator's offset so that each shard draws its own numbers: a Shard(0) init is
    reproducible, differs between the shards, and moves every rank's offset alike; a Replicate
    init is the same on every rank."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

    mesh = init_device_mesh("simhpu", (world,))

    def sharded_init():
        torch.manual_seed(42)
        t = distribute_tensor(torch.empty(8, 16, device=device()), mesh, [Shard(0)])
        torch.nn.init.normal_(t)
        return t.to_local().cpu(), torch.simhpu.get_rng_state().view(torch.int64).tolist()

    local, state = sharded_init()
    again, state_again = sharded_init()
    assert_close(local, again, rtol=0, atol=0)
    assert state == state_again and state[1] > 0
    shards = [torch.empty_like(local, device=device()) for _ in range(world)]
    dist.all_gather(shards, local.to(device()))
    shards = [s.cpu() for s in shards]
    assert not torch.equal(shards[0], shards[1])
    offsets = [None] * world
    dist.all_gather_object(offsets, state[1])
    assert len(set(offsets)) == 1, offsets

    torch.manual_seed(7)
    replicated = distribute_tensor(torch.empty(4, 4, device=device()), mesh, [Replicate()])
    torch.nn.init.uniform_(replicated)
    copies = [torch.empty(4, 4, device=device()) for _ in range(world)]
    dist.all_gather(copies, replicated.to_local())
    assert_close(copies[0].cpu(), copies[1].cpu(), rtol=0, atol=0)
    return True


def compiled_functional_all_reduce(rank, world):
    """torch.compile of a function with a functional collective (what DTensor and
    compiled FSDP2 trace to) against the same function in eager mode."""
    import torch.distributed._functional_collectives as funcol

    def f(x):
        return funcol.all_reduce(x * 2, "sum", dist.group.WORLD).sin() + 1

    x = torch.full((8,), float(rank + 1), device=device())
    expected = torch.full((8,), 2.0 * sum(range(1, world + 1))).sin() + 1
    assert_close(f(x).cpu(), expected)
    assert_close(torch.compile(f, fullgraph=True)(x).cpu(), expected)


def compiled_ddp_matches_cpu(rank, world):
    """torch.compile of a DDP module: Dynamo splits the graph at bucket boundaries
    and the gradients' all-reduces run between the compiled pieces."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    reference = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(DistributedDataParallel(model.to(device())))
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)
    shard = slice(rank * 4, rank * 4 + 4)
    torch.nn.functional.mse_loss(compiled(x[shard].to(device())), y[shard].to(device())).backward()
    torch.nn.functional.mse_loss(reference(x), y).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6)


# Faults: each runs in a group of its own, which it leaves broken.

def peer_exits(rank, world):
    """Rank 1 exits without a word; rank 0's next collective must fail, and say so, not hang."""
    if rank == 1:
        threading.Timer(0.2, lambda: os._exit(3)).start()
        return None
    time.sleep(1.0)
    return _failing_all_reduce()


def peer_never_arrives(rank, world):
    """Rank 1 skips the collective: rank 0's fails once the group's timeout passes."""
    if rank == 1:
        return None
    return _failing_all_reduce()


def _failing_all_reduce():
    start = time.perf_counter()
    x = torch.ones(1 << 16, device=device())
    dist.all_reduce(x)
    try:
        x.cpu()
    except RuntimeError as e:
        message = str(e)
    else:
        raise AssertionError("the all_reduce succeeded without its peer")
    try:
        torch.simhpu.synchronize()  # the communication stream reports its failure too
    except RuntimeError:
        pass
    # The device still works.
    assert_close((torch.arange(4.0, device=device()) * 2).cpu(), torch.arange(4.0) * 2)
    return message, time.perf_counter() - start


def simulated_all_reduce_orders_the_streams(rank, world):
    """Simulated time: a 64 MB all_reduce starts on the communication stream once
    the compute stream's producer ended, takes the fabric model's time for the
    group's size, and the consumer after work.wait() starts once it ended."""
    x = torch.ones(16 << 20, device=device())
    torch.simhpu.synchronize()
    with torch.simhpu.simulate("h100-sxm", host_time="modelled") as sim:
        y = x * 2
        work = dist.all_reduce(y, async_op=True)
        work.wait()
        z = y + 1
    (collective,) = [x for x in sim.launches if x.work == "collective"]
    (producer,) = [x for x in sim.launches if x.op == "aten::mul.Tensor"]
    (consumer,) = [x for x in sim.launches if x.op == "aten::add.Tensor"]
    assert collective.collective == "all_reduce" and collective.ranks == world and collective.bytes == 64 << 20
    assert collective.stream != producer.stream == consumer.stream
    assert collective.start >= producer.end and consumer.start >= collective.end
    # it waited, through work.wait()'s completion marker, for the collective
    by_id = {x.id: x for x in sim.launches}
    chain, at = [], consumer
    while at.after in by_id:
        at = by_id[at.after]
        chain.append(at.id)
    assert collective.id in chain
    torch.simhpu.set_profile("h100-sxm")
    expected = torch_simhpu._C._simclock_collective_seconds("all_reduce", 64 << 20, world)
    projected = sim.collectives()[0]["projected"]
    torch.simhpu.set_profile(None)
    assert abs(collective.duration - expected) < 1e-12
    assert projected[8] < projected[64] < projected[1024]
    del z
    return collective.duration


def fsdp2_steps_simulated_timeline(rank, world, execute):
    """Two FSDP2 steps (bfloat16 parameters, float32 reductions) under simulated time with
    the part's modelled host: every launch's op, stream and simulated launch, start and end
    (ns). How the kernels really ran (the asynchronous queue, blocking, or not at all under
    phantom execution) and how long gloo's worker took must not change any of them."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU())
                                  for _ in range(6)]).to(device())
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    x = torch.randn(16, 64, device=device())

    def step():
        model(x).float().square().mean().backward()
        opt.step()
        opt.zero_grad()
    step()  # (a first step runs Python no later one does, its imports among them: whichever ran in this process before)
    torch.simhpu.synchronize()
    from torch_simhpu.simulation import part_fit
    # (with the program's Python lines priced: FSDP2's hooks and torch.optim run the same lines however the kernels ran)
    profile = dict(part_fit._raw("h100-sxm"), host_python_line=0.3e-6)
    with torch.simhpu.simulate(profile, execute=execute, _keep_capacity=True) as sim:
        for _ in range(2):
            step()
    # (streams by the order the step first used them: which of the device's pool a process hands
    # out depends on what ran in it before)
    streams = {}
    return [(x.op, streams.setdefault(x.stream, len(streams)), round(x.launched * 1e9), round(x.start * 1e9),
             round(x.end * 1e9)) for x in sim.launches]


def fsdp2_step_makes_no_device_wide_wait(rank, world):
    """FSDP2 frees each block's unsharded parameters after its forward and
    backward (untyped_storage().resize_(0)) and grows them again before the next
    all-gather: on CUDA none of that makes the host wait for the device. Counts
    the device-wide waits of a whole training step (the data's blocking copies
    wait for one stream, not the device), and checks the step still learns."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()) for _ in range(3)])
    model.to(device())
    for block in model:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(device())), y.to(device()))
        loss.backward()
        opt.step()
        return loss

    first = step().item()  # the first step builds FSDP's state
    before = torch_simhpu._C._device_wide_waits()
    for _ in range(2):
        loss = step()
    waits = torch_simhpu._C._device_wide_waits() - before
    last = loss.item()
    assert waits == 0, f"{waits} device-wide waits in two FSDP2 steps"
    assert last < first, (first, last)
    return waits


def race_corpus_case(rank, world, name, mode, seeds=()):
    """A 2-process program of tests/race_corpus: "racy" under the sanitizer
    (its reports), "fixed" under the sanitizer in raise mode (its result), or
    "chaos": the racy program under chaos scheduling and poison, seed by seed,
    until it gives a wrong value or an error (the seed that did, or None)."""
    import importlib

    case = importlib.import_module(f"race_corpus.{name}")
    sanitizer = torch.simhpu.sanitizer
    if mode == "racy":
        with sanitizer.enabled("record"):
            case.racy(rank, world)
            torch.simhpu.synchronize()
            found = sanitizer.reports()
            sanitizer.clear_reports()
        return found
    if mode == "fixed":
        with sanitizer.enabled("raise"):
            right = case.fixed(rank, world)
            torch.simhpu.synchronize()
        return right
    for seed in seeds:
        with torch.simhpu.chaos.scheduling(seed), sanitizer.enabled("record", poison=True):
            try:
                right = case.racy(rank, world)
                torch.simhpu.synchronize()
            except RuntimeError:
                right = False
            sanitizer.clear_reports()
        # every rank goes on until all have seen it go wrong, so the collectives stay matched
        wrong = torch.tensor([0.0 if right else 1.0], device=device())
        dist.all_reduce(wrong)
        if float(wrong.item()) > 0:
            return seed
    return None


def an_input_is_let_go_at_wait_and_judged_on_its_allocation_stream(rank, world):
    """As ProcessGroupNCCL stashes an async collective's inputs until wait():
    an input dropped before wait() is safe until then, and is freed at wait(),
    where the caller's stream is ordered after the collective but its allocation
    stream is not. The allocation stream taking memory again before it waits too
    is the race; the twin makes it wait first."""
    sanitizer = torch.simhpu.sanitizer
    side = torch.simhpu.Stream()
    out = torch.empty(world * 256, device=device())

    def program(order_the_allocation_stream):
        side.wait_stream(torch.simhpu.current_stream())
        with torch.simhpu.stream(side):
            inp = torch.full((256,), float(rank + 1), device=device())  # allocated on the side stream
            work = dist.all_gather_into_tensor(out, inp, async_op=True)
        del inp  # before wait(): the work keeps it
        work.wait()  # on the default stream: the input is let go here
        if order_the_allocation_stream:
            side.wait_stream(torch.simhpu.current_stream())
        with torch.simhpu.stream(side):
            torch.empty(256, device=device())  # the side stream takes memory again

    with sanitizer.enabled("record"):
        program(order_the_allocation_stream=False)
        found = sanitizer.reports()
        sanitizer.clear_reports()
        program(order_the_allocation_stream=True)
        clean = sanitizer.reports()
        torch.simhpu.synchronize()
    assert len(found) == 1 and "all_gather_into_tensor" in found[0] and "took memory again" in found[0], found
    assert clean == [], clean
    assert_close(out.cpu(), torch.cat([torch.full((256,), float(r + 1)) for r in range(world)]))
    return found[0]


def context_parallel_attention_matches_cpu(rank, world, rotate_method="allgather"):
    """PyTorch's ring attention (`context_parallel`: each rank holds 1/world of the sequence,
    head and tail chunks for causal balance, keys and values passed round the ring) over the
    device's fused attention, grouped-query and causal as Llama's, under the backend order
    torchtitan sets (cuDNN first): its output and gradients are the whole sequence's on the CPU."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard, set_rotate_method
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, heads, 8 * world, 16, generator=g) for heads in (4, 2, 2))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected_out = F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
    upstream = torch.cos(expected_out.detach())  # a gradient that differs along the sequence
    expected_out.backward(upstream)
    expected = [expected_out.detach()] + [t.grad for t in leaves]

    mesh = init_device_mesh("simhpu", (world,))
    set_rotate_method(rotate_method)
    buffers = [t.to(device()) for t in (q, k, v, upstream)]  # sharded in place, all alike
    with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2, 2]):
        shards = [t.detach().requires_grad_() for t in buffers[:3]]
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH], set_priority=True):
            with _OperatorNames() as seen:
                out = F.scaled_dot_product_attention(*shards, is_causal=True, enable_gqa=True)
                out.backward(buffers[3])
        got = context_parallel_unshard(mesh, [out.detach()] + [t.grad for t in shards], [2, 2, 2, 2])
    assert "aten._scaled_dot_product_cudnn_attention.default" in seen.names, seen.names
    assert "aten._scaled_dot_product_cudnn_attention_backward.default" in seen.names, seen.names
    for name, g_, e in zip(("output", "query grad", "key grad", "value grad"), got, expected):
        assert_close(g_.cpu(), e, atol=1e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}")


class _OperatorNames:
    """The ATen operators called inside the block, by name."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        names = self.names = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                names.append(str(func))
                return func(*args, **(kwargs or {}))

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)
