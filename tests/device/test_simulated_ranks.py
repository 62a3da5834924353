"""Simulated ranks (python -m torch_simhpu.simulation --world N --rank r,
torch_simhpu/simulation/simulated_ranks.py): one process plays one rank of a large world with
no peers present; the script's torch.distributed, DeviceMesh, FSDP2 and tensor
parallelism run unchanged, and each collective is priced for its group's place in
the world."""
import re

from tests.helpers import run_python

SCRIPT = r'''
import json, os, sys
import torch, torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

dist.init_process_group()  # env://, as torchrun would have it
assert dist.get_world_size() == 256 and dist.get_rank() == int(sys.argv[1])
mesh = init_device_mesh("simhpu", (32, 8), mesh_dim_names=("dp", "tp"))

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(1024, 4096, bias=False)
        self.down = nn.Linear(4096, 1024, bias=False)
    def forward(self, x):
        return self.down(torch.relu(self.up(x)))

with torch.device("meta"):
    model = nn.Sequential(*[Block() for _ in range(4)])
for block in model:
    parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(block, mesh=mesh["dp"])
fully_shard(model, mesh=mesh["dp"])
model.to_empty(device="simhpu")
for block in model:
    for p in block.parameters():
        nn.init.normal_(p, std=0.02)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(8, 512, 1024, device="simhpu")
loss = model(x).float().square().mean()
loss.backward()
opt.step()
print("LOSS", loss.item())
'''


def test_fsdp_and_tensor_parallel_at_256_ranks_run_unchanged_and_price_their_groups(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    code = ("import sys; from torch_simhpu.simulation import main; "
            "sys.exit(main(['--profile', 'h100-sxm', '--world', '256', '--rank', '9', 'train.py', '9']))")
    out = run_python(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "LOSS 1.0" in out.stdout  # a placeholder: no values were computed
    assert re.search(r"phantom: (none|\d+) ran", out.stdout)  # (only kernels over values the host knew)
    # Priced for their groups: FSDP's all-gathers and reduce-scatters over the data-parallel
    # group (32 ranks, one per node: the network), tensor parallelism's all-reduces over
    # its group (8 ranks of one node: the node's links, so much faster per byte).
    groups = {}
    for line in out.stdout.splitlines():
        words = line.split()
        if len(words) > 5 and words[0] in ("all_gather", "reduce_scatter", "all_reduce") and words[5].startswith("("):
            groups[words[0]] = (int(words[5].strip("()")), float(words[1]), float(words[3]) * _UNIT[words[4]])
    assert groups["all_gather"][0] == 32 and groups["reduce_scatter"][0] == 32 and groups["all_reduce"][0] == 8
    per_byte = {kind: seconds / size for kind, (_, size, seconds) in groups.items()}
    assert per_byte["all_gather"] > 5 * per_byte["all_reduce"], groups


_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def test_environment_variables_need_phantom_execution(tmp_path):
    out = run_python("import torch_simhpu", cwd=tmp_path, SIMHPU_SIMULATED_WORLD="8")
    assert out.returncode != 0
    assert "simulated ranks run under phantom execution on a part" in out.stderr


def test_simulated_ranks_refuse_execution_and_a_rank_outside_the_world(tmp_path):
    (tmp_path / "train.py").write_text("print('ran')\n")
    for args, expected in ((["--world", "8", "--execute"], "--world runs under phantom execution"),
                           (["--world", "8", "--rank", "8"], "--rank: every rank must be in [0, 8)")):
        out = run_python("import sys; from torch_simhpu.simulation import main; "
                         f"sys.exit(main(['--profile', 'h100-sxm', *{args!r}, 'train.py']))", cwd=tmp_path)
        assert out.returncode != 0 and expected in out.stderr and "ran" not in out.stdout, out.stderr[-2000:]


def test_phantom_from_the_environment_refuses_an_unknown_value(tmp_path):
    out = run_python("import torch_simhpu", cwd=tmp_path, SIMHPU_DEVICE_PROFILE="h100-sxm", SIMHPU_EXECUTE="maybe")
    assert out.returncode != 0 and "SIMHPU_EXECUTE must be 1 or 0, got 'maybe'" in out.stderr


GROUPS_SCRIPT = r'''
import json, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group()
mesh = init_device_mesh("simhpu", (32, 8), mesh_dim_names=("dp", "tp"))
big = torch.empty(64 * 2**20, device="simhpu", dtype=torch.bfloat16)
small = torch.empty(1024, device="simhpu")
with torch.simhpu.simulate() as sim:
    gathered = torch.empty(32 * big.numel(), device="simhpu", dtype=torch.bfloat16)
    # across 32 nodes: slow; async, as FSDP's prefetching all-gathers are
    work = dist.all_gather_into_tensor(gathered, big, group=mesh["dp"].get_group(), async_op=True)
    dist.all_reduce(small, group=mesh["tp"].get_group())  # within a node
    work.wait()
print(json.dumps([(x.op, x.stream, x.ranks, x.start, x.end) for x in sim.launches if x.work == "collective"]))
'''


def test_each_group_has_its_own_communication_stream(tmp_path):
    """As each NCCL communicator has its own stream: a tensor-parallel all-reduce launched after
    a long FSDP-sized all-gather of another group runs beside it, not behind it."""
    import json

    (tmp_path / "groups.py").write_text(GROUPS_SCRIPT)
    out = run_python("import sys; from torch_simhpu.simulation import main; "
                     "sys.exit(main(['--profile', 'h100-sxm', '--world', '256', 'groups.py']))", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    (gather, g_stream, g_ranks, g_start, g_end), (reduce, r_stream, r_ranks, r_start, r_end) = json.loads(
        [line for line in out.stdout.splitlines() if line.startswith("[[")][0])
    assert (gather, g_ranks, reduce, r_ranks) == ("all_gather_into_tensor", 32, "all_reduce", 8)
    assert g_stream != r_stream
    assert r_start < g_end and r_end < g_end, (g_start, g_end, r_start, r_end)


COMPILED_SCRIPT = r'''
import torch, torch.distributed as dist
from torch import nn
from torch._dynamo.utils import counters
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group()
mesh = init_device_mesh("simhpu", (8,))
model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).to("simhpu")
fully_shard(model, mesh=mesh)
model = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for _ in range(2):
    loss = model(torch.randn(16, 256, device="simhpu")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("LOSS", loss.item())
print("FRAMES COMPILED", counters["frames"]["ok"])
'''


def test_a_compiled_fsdp_model_runs_unchanged_on_a_simulated_rank(tmp_path):
    """torch.compile under phantom execution and simulated ranks: Inductor compiles the
    frames it can (FSDP's hooks break the graph where they do on any device), the compiled
    kernels are priced, not run, and the gathers and reduce-scatters are priced for the group."""
    (tmp_path / "train.py").write_text(COMPILED_SCRIPT)
    out = run_python("import sys; from torch_simhpu.simulation import main; "
                     "sys.exit(main(['--profile', 'h100-sxm', '--world', '8', '--rank', '3', 'train.py']))",
                     cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "LOSS 1.0" in out.stdout and re.search(r"phantom: (none|\d+) ran", out.stdout)
    compiled = int(next(line for line in out.stdout.splitlines() if line.startswith("FRAMES COMPILED")).split()[-1])
    assert compiled >= 1, out.stdout
    priced = {line.split()[0]: line.split()[5] for line in out.stdout.splitlines()
              if line.split()[:1] in (["all_gather"], ["reduce_scatter"])}
    assert priced == {"all_gather": "(8)", "reduce_scatter": "(8)"}, out.stdout[-2000:]


def test_gloo_groups_form_without_their_peers(tmp_path):
    """CPU offload and async checkpointing ask for gloo ("cpu:gloo,...", new_group(backend="gloo")),
    whose groups connect to every member before they return: under simulated ranks simccl serves them."""
    (tmp_path / "train.py").write_text(r'''
import datetime, torch, torch.distributed as dist
dist.init_process_group("cpu:gloo,simhpu:simccl", timeout=datetime.timedelta(seconds=20))
on_host = torch.ones(4)
dist.all_reduce(on_host)  # answered as if each of the 64 held what this rank holds
checkpointing = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=20))
dist.all_reduce(on_host, group=checkpointing, op=dist.ReduceOp.AVG)
elsewhere = torch.ones(2)
dist.reduce(elsewhere, dst=(dist.get_rank() + 1) % 64)  # reduce answers its root alone, on the host too
at_root = torch.ones(2)
dist.reduce(at_root, dst=dist.get_rank())
assert elsewhere.tolist() == [1.0, 1.0] and at_root.tolist() == [64.0, 64.0], (elsewhere, at_root)
dist.all_reduce(torch.ones(4, device="simhpu"))
print("BACKENDS", dist.get_backend(), dist.get_backend(checkpointing), on_host.tolist())
''')
    out = run_python("import sys; from torch_simhpu.simulation import main; "
                     "sys.exit(main(['--profile', 'h100-sxm', '--world', '64', '--rank', '3', 'train.py']))",
                     cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "BACKENDS" in out.stdout and "[64.0, 64.0, 64.0, 64.0]" in out.stdout


REDUCTIONS_SCRIPT = r'''
import json, torch, torch.distributed as dist
dist.init_process_group()
world = dist.get_world_size()
answers = {}
for name, op in (("sum", dist.ReduceOp.SUM), ("avg", dist.ReduceOp.AVG), ("max", dist.ReduceOp.MAX),
                 ("product", dist.ReduceOp.PRODUCT), ("premul_sum", dist._make_nccl_premul_sum(0.5))):
    t = torch.tensor([1.0, 2.0], device="simhpu")  # (made from host data: its values are known)
    dist.all_reduce(t, op=op)
    answers[name] = t.tolist()
out = torch.empty(2, device="simhpu")
dist.reduce_scatter_tensor(out, torch.arange(2.0 * world, device="simhpu"))
answers["reduce_scatter"] = out.tolist()
own = torch.tensor([3.0], device="simhpu")
dist.reduce(own, dst=dist.get_rank())
answers["reduce_at_root"] = own.tolist()
other = torch.tensor([3.0], device="simhpu")
dist.reduce(other, dst=(dist.get_rank() + 1) % world)
answers["reduce_elsewhere"] = other.tolist()
print("RESULT", json.dumps(answers))
'''


def test_reductions_among_simulated_peers_answer_as_if_each_held_what_this_rank_holds(tmp_path):
    """A sum over 8 simulated peers of a known value is 8 times it (a loss or a gradient norm the
    program reads back is the job's, not one rank's), a mean or maximum the value, a product its
    power; reduce_scatter gives this rank's part of its input, reduced; reduce answers the root alone."""
    import json

    (tmp_path / "reduce.py").write_text(REDUCTIONS_SCRIPT)
    out = run_python("import sys; from torch_simhpu.simulation import main; "
                     "sys.exit(main(['--profile', 'h100-sxm', '--world', '8', '--rank', '2', 'reduce.py']))",
                     cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    answers = json.loads(out.stdout.split("RESULT", 1)[1].splitlines()[0])
    assert answers == {"sum": [8.0, 16.0], "avg": [1.0, 2.0], "max": [1.0, 2.0], "product": [1.0, 256.0],
                       "premul_sum": [4.0, 8.0], "reduce_scatter": [32.0, 40.0], "reduce_at_root": [24.0],
                       "reduce_elsewhere": [3.0]}, answers
    assert "host reads of device values" not in out.stdout, out.stdout[-3000:]


EXPERT_COUNTS_SCRIPT = r'''
import json, sys, torch, torch.distributed as dist
from torch.distributed._functional_collectives import all_to_all_single

dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
import torch_simhpu.simulation.phantom
tokens = torch.randn(512, 64, device="simhpu")
torch_simhpu.simulation.phantom.forget_values(tokens)  # (as a model's activations: values nobody computed)
experts = torch.nn.Linear(64, 16).to("simhpu")(tokens).argmax(-1)
counts = torch.histc(experts.float(), bins=16, min=0, max=15)  # the stated routing's counts: known
exchanged = all_to_all_single(counts, None, None, group=dist.group.WORLD)
exchanged = torch.ops._c10d_functional.wait_tensor(exchanged)
splits = exchanged.view(world, -1).sum(1).to("cpu").tolist()  # what torchtitan's expert parallelism reads
gathered = torch.empty(world * 16, device="simhpu")
dist.all_gather_into_tensor(gathered, counts)
# uneven splits: this rank's own share (its part of its input), repeated to fill each peer's part
uneven = torch.arange(10.0, device="simhpu")
received = torch.empty(8, device="simhpu")
dist.all_to_all_single(received, uneven, output_split_sizes=[2] * 4, input_split_sizes=[1, 2, 3, 4])
print("RESULT", json.dumps({"counts": counts.tolist(), "splits": splits, "gathered": gathered.tolist(),
                            "uneven": received.tolist()}))
'''


def test_an_expert_routers_counts_exchanged_among_simulated_peers_stay_known(tmp_path):
    """Expert parallelism's all_to_all_single of a router's token counts, on a simulated rank:
    every peer is taken to route as this rank does, so this rank receives, from each, its own
    count for its own experts: a skewed routing sends rank 0 (the first experts) more tokens
    than the last rank, and the split sizes the program reads are those, not placeholders."""
    import json

    (tmp_path / "route.py").write_text(EXPERT_COUNTS_SCRIPT)
    results = {}
    for routing, rank in (("balanced", "0"), ("zipf:1.0", "0"), ("zipf:1.0", "3")):
        code = ("import sys; from torch_simhpu.simulation import main; "
                f"sys.exit(main(['--profile', 'h100-sxm', '--world', '4', '--rank', '{rank}', 'route.py']))")
        out = run_python(code, cwd=tmp_path, SIMHPU_PHANTOM_ROUTING=routing)
        assert out.returncode == 0, out.stderr[-3000:]
        results[routing, rank] = json.loads(out.stdout.split("RESULT", 1)[1].splitlines()[0])
        assert "host reads of device values" not in out.stdout, out.stdout[-3000:]
        assert re.search(r"\(3 collectives answered as if every simulated peer sent what this rank sends\)",
                         out.stdout), out.stdout[-3000:]
    balanced = results["balanced", "0"]
    assert balanced["counts"] == [32.0] * 16 and balanced["splits"] == [128.0] * 4
    assert balanced["gathered"] == [32.0] * 64  # every peer's counts: this rank's
    skewed, last = results["zipf:1.0", "0"], results["zipf:1.0", "3"]
    own = lambda r, counts: sum(counts[4 * r:4 * r + 4])  # noqa: E731 (the counts for rank r's four experts)
    assert skewed["splits"] == [own(0, skewed["counts"])] * 4 and last["splits"] == [own(3, last["counts"])] * 4
    assert skewed["splits"][0] > 3 * last["splits"][0]  # the hot experts' rank gets many more tokens
    assert sum(skewed["counts"]) == 512.0
    assert skewed["uneven"] == [0.0, 0.0] * 4  # rank 0's own share: input[0:1], repeated
    assert last["uneven"] == [6.0, 7.0] * 4    # rank 3's: input[6:10], its start in each part of 2
