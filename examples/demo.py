"""A short tour of torch_simhpu: the device, a few YAML-declared operators,
autograd, torch.compile, the reference path (every other PyTorch operator) and
simulated time."""
import torch

import torch_simhpu

print(f"torch {torch.__version__}, torch_simhpu from {torch_simhpu.__file__}")
print(f"simhpu devices: {torch.simhpu.device_count()}, current: {torch.simhpu.current_device()}")

x = torch.randn(4, 8).to("simhpu")
y = torch.randn(8).simhpu()
print(f"x on {x.device}, y on {y.device}")

z = torch_simhpu.npu_add_custom(x, y)  # broadcasting add on a device kernel
torch.testing.assert_close(z.cpu(), x.cpu() + y.cpu())
print("npu_add_custom matches torch.add on CPU")

gamma = torch.ones(8, device="simhpu", requires_grad=True)
xg = x.clone().requires_grad_()
out, rstd = torch_simhpu.npu_rms_norm(xg, gamma, eps=1e-6)
out.square().sum().backward()
print(f"npu_rms_norm: out {tuple(out.shape)}, rstd {tuple(rstd.shape)}, x.grad on {xg.grad.device}")


@torch.compile(fullgraph=True)  # Inductor; each call is one launch on the stream
def block(a, w):
    h, _ = torch_simhpu.npu_rms_norm(a, w)
    return torch_simhpu.npu_swish(h, beta=1.5)


compiled = block(x, gamma.detach())
torch.testing.assert_close(compiled.cpu(), torch_simhpu.npu_swish(torch_simhpu.npu_rms_norm(x, gamma.detach())[0], beta=1.5).cpu())
print("torch.compile(fullgraph=True) of two npu ops matches eager")

# Capture once, replay with one queue operation.
graph = torch.simhpu.Graph()
static_in = x.detach().clone()
with torch.simhpu.graph(graph):
    static_out = (static_in.sin() * 2).relu()
static_in.copy_(x.detach() * 3)
graph.replay()
torch.testing.assert_close(static_out.cpu(), ((x.detach() * 3).sin() * 2).relu().cpu())
print(f"torch.simhpu.Graph: {graph.kernel_count} captured kernels replayed as one launch")

# Operators with no kernel of the device's own run ATen's CPU kernel as a device
# kernel, asynchronously; op_routes tells which way each one went.
conv = torch.nn.Conv1d(4, 2, 3).to("simhpu")
with torch.simhpu.op_routes() as routes:
    z = conv(x.detach().reshape(1, 4, 8)).softmax(-1)
    above = torch.nonzero(z > 0.1)  # its shape depends on the data: the host waits
torch.testing.assert_close(z.cpu(), conv.cpu()(x.detach().cpu().reshape(1, 4, 8)).softmax(-1))
print(f"conv1d + softmax on the reference path: {tuple(z.shape)} on {z.device}, as on the CPU; "
      f"{routes.total('reference')} reference launches, synchronised: {routes.ops('synchronized')}")
# What a real part would take: the same program, priced launch by launch on a profile.
a = torch.randn(2048, 2048, device="simhpu")
with torch.simhpu.simulate("h100-sxm", host_time="modelled") as sim:
    for _ in range(4):
        a = torch.nn.functional.gelu(a @ a / 2048)
matmul = sim.operators()[0]
print(f"simulated on {sim.profile}: {sim.span * 1e3:.3f} ms for 4 x (2048^2 matmul + gelu), "
      f"{matmul['op']} {matmul['bound']}-bound at {matmul['peak'] * 100:.0f}% of peak, {sim.verdict()}")
try:
    torch_simhpu.npu_add_custom(x.cpu(), y)
except RuntimeError as e:
    print(f"bad input is reported: {str(e).splitlines()[0]}")
torch.simhpu.synchronize()
print("demo ok")
