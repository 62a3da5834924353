"""torch_npu.contrib.transfer_to_npu: a program written for CUDA runs on the npu device and computes what the
CPU computes. Each case runs in a process of its own: the module changes torch for the whole process."""
import subprocess
import sys
import textwrap

PROGRAM = """
import torch
import torch_npu
from torch_npu.contrib import transfer_to_npu  # noqa: F401

torch.manual_seed(0)
cpu_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
model.load_state_dict(cpu_model.state_dict())
model.cuda()
x = torch.randn(2, 4)
y = model(x.cuda()) + torch.ones(2, 3, device="cuda:0")
torch.cuda.synchronize()
assert torch.cuda.is_available() and torch.cuda.device_count() >= 1 and torch.cuda.current_device() == 0
assert y.device.type == "npu" and next(model.parameters()).device.type == "npu"
torch.testing.assert_close(y.cpu(), cpu_model(x) + 1)
z = torch.zeros(3, device=torch.device("cuda", 0)).to("cuda")
assert z.device == torch.device("npu", 0)
with torch.cuda.amp.autocast(dtype=torch.bfloat16):
    assert model(x.cuda()).dtype == torch.bfloat16
print("ran on", y.device)
"""


def run(program):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(program)], capture_output=True, text=True,
                          timeout=300)


def test_a_cuda_program_runs_on_the_npu_device_and_matches_the_cpu():
    done = run(PROGRAM)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ran on npu:0" in done.stdout


def test_without_it_cuda_stays_cuda():
    done = run("import torch, torch_npu\nprint(torch.cuda.is_available(), torch.ones(1).to('npu').device)")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "npu:0"]
