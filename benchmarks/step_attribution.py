"""A training step's price against the part, class by class: where simulated time is wrong.

    python benchmarks/step_attribution.py benchmarks/measurements/step-kernels-h200-2026-11-28.json h200

For each model zoo step in the file (what benchmarks/step_kernels.py recorded on a real part: the
device time of every operator's kernels, the device's busy time, the step's wall time), the same
step is priced on simhpu under phantom execution with the named profile, and both are grouped by
what the operators are (matrix products, attention, convolutions forward and backward, norms,
elementwise, copies, reductions, the optimizer's multi-tensor kernels, ...). It prints, per step:
the wall time and the device's busy time, measured and priced, then each class's device time
measured and priced. A class priced 40 % fast in every model is a mechanism to fix; a step whose
busy time is right but whose wall time is not is the host's.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

# What an operator is, from its ATen name on either side (the part runs cuDNN's and cuBLAS's
# variants, simhpu its own): the first pattern that matches names the class.
CLASSES = (
    ("attention", r"attention"),
    ("convolution backward", r"convolution_backward"),
    ("convolution", r"convolution|conv2d|cudnn_convolution"),
    ("matrix", r"^(aten::)?(mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation)$"),
    ("norm backward", r"(layer_norm|batch_norm|group_norm|rms_norm)_backward|batch_norm_backward"),
    ("norm", r"layer_norm|batch_norm|group_norm|rms_norm|_batch_norm"),
    ("softmax / cross-entropy", r"softmax|nll_loss|cross_entropy"),
    ("optimizer (foreach)", r"_foreach_|_fused_adam"),
    ("pooling", r"pool"),
    ("embedding / index", r"embedding|index|gather|scatter"),
    ("reduction", r"^(aten::)?(sum|mean|amax|max|min|var|std|norm|argmax)$"),
    ("copy / layout", r"^(aten::)?(copy_|_copy_from|_to_copy|clone|contiguous|cat|stack|fill_|zero_|zeros|_unsafe_view|t|transpose)$"),
    ("random", r"dropout|bernoulli|rand|native_dropout"),
)


def op_class(name: str) -> str:
    short = name.split("::")[-1].split(".")[0]  # (simhpu's names carry the overload: "mm.out")
    for cls, pattern in CLASSES:
        if re.search(pattern, short):
            return cls
    return "elementwise / other"


def measured_classes(step: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for op in step["operators"]:
        cls = op_class(op["op"])
        out[cls] = out.get(cls, 0.0) + op["device_us"] * 1e-6
    return out


def priced_step(model: str, profile: str, scale: str = "gpu") -> dict:
    """Prices two steps (after one to warm up) under phantom execution, as the part ran them (bfloat16 autocast at
    "gpu" scale, float32 at "cpu" scale); the last one's launches by class."""
    import torch
    import torch_simhpu  # noqa: F401 - the device
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from torch_simhpu import model_zoo

    from torch_simhpu.simulation import part_fit
    optimizer_began = []
    hook = register_optimizer_step_pre_hook(
        lambda *_: optimizer_began.append(torch_simhpu._C._simclock_host_now()))
    with part_fit._phantom(profile) as sim:
        step = model_zoo.training_step(model, "simhpu", scale=scale, autocast=scale == "gpu")
        step()
        torch.simhpu.synchronize()
        t0 = torch_simhpu._C._simclock_host_now()
        step()
        torch.simhpu.synchronize()
        wall = torch_simhpu._C._simclock_host_now() - t0
        del step
    hook.remove()
    launches = [x for x in sim.kernels() if x.launched >= t0]  # the second step's
    classes: dict[str, float] = {}
    ops: dict[str, float] = {}
    for x in launches:
        # (simhpu's _foreach_ operators launch their tensors' operators: the step's are the optimizer's)
        cls = "optimizer (foreach)" if x.launched >= optimizer_began[-1] else op_class(x.op)
        classes[cls] = classes.get(cls, 0.0) + x.duration
        name = cls if cls == "optimizer (foreach)" else x.op.split(".")[0]
        ops[name] = ops.get(name, 0.0) + x.duration
    spans = [(x.start, x.end) for x in launches]
    return dict(wall=wall, busy=part_fit._busy(spans), classes=classes, ops=ops, launches=len(launches))


def _operators(step: dict, priced: dict, cls: str):
    """The class's operators on each side, largest first: (name with shapes, seconds, side)."""
    rows = [(f"{op['op']} x{op['calls']} {op['shapes'][:2]}", op["device_us"] * 1e-6, "part  ")
            for op in step["operators"] if op_class(op["op"]) == cls and cls != "optimizer (foreach)"]
    rows += [(name, seconds, "simhpu") for name, seconds in priced["ops"].items()
             if (op_class(name) == cls and name != "optimizer (foreach)")]
    return sorted(rows, key=lambda r: -r[1])[:12]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measured", help="a step-kernels file (benchmarks/step_kernels.py)")
    parser.add_argument("profile", help="the profile that prices the part (h100-sxm, h200, a path)")
    parser.add_argument("--steps", help="only these models, comma-separated")
    parser.add_argument("--ops", action="store_true", help="each class's operators too")
    args = parser.parse_args(argv)
    data = json.loads(Path(args.measured).read_text())
    wanted = set(args.steps.split(",")) if args.steps else None
    print(f"{data.get('part', '?')} ({data.get('software', '')}, {data.get('measured', '')}) priced by {args.profile}")
    for step in data["steps"]:
        if "failed" in step or (wanted and step["model"] not in wanted):
            continue
        priced = priced_step(step["model"], args.profile, step.get("scale", "gpu"))
        measured = measured_classes(step)
        print(f"\n{step['model']}: wall {step['wall_seconds'] * 1e3:.2f} ms measured, {priced['wall'] * 1e3:.2f} priced; "
              f"device busy {step['busy_seconds'] * 1e3:.2f} / {priced['busy'] * 1e3:.2f} ms; "
              f"kernels {step['kernel_seconds'] * 1e3:.2f} / {sum(priced['classes'].values()) * 1e3:.2f} ms; "
              f"launches {step['launches']} / {priced['launches']}")
        if step["busy_seconds"] > step["kernel_seconds"] * 1.001:
            # (a file recorded before step_kernels.py left user annotations out of the busy time)
            print("    (the part's busy time exceeds its kernels' sum: it counts spans other than kernels', "
                  "annotations' most likely; hold the kernels' sums)")
        for cls in sorted(set(measured) | set(priced["classes"]), key=lambda c: -measured.get(c, 0.0)):
            m, p = measured.get(cls, 0.0), priced["classes"].get(cls, 0.0)
            ratio = f"{p / m:6.2f}x" if m > 0 else "   -   "
            print(f"    {cls:<26} measured {m * 1e3:8.3f} ms  priced {p * 1e3:8.3f} ms  {ratio}")
            if args.ops:
                for name, seconds, side in _operators(step, priced, cls):
                    print(f"        {side} {seconds * 1e3:8.3f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
