"""Rows for the reference path: ATen's CPU kernels run as device kernels.

- host time to launch a reference-path op (torch.exp on 8 elements) against CPU torch.exp;
- a tiny GPT-2 training step (2 layers, 128 wide, batch 8 x 64, AdamW), simhpu against CPU,
  from the same initial weights;
- host synchronisations in that step, other than .item()/.cpu() the model asks for itself.
"""
import copy
import math
import warnings


def exp_launch_seconds(best_pair, torch):
    x = torch.randn(8)
    xd = x.to("simhpu")
    calls = 20_000

    def on(t):
        def run():
            for _ in range(calls):
                t.exp()
        return run

    torch.simhpu.synchronize()
    cpu, ours = best_pair(on(x), on(xd), calls)
    torch.simhpu.synchronize()
    return cpu, ours


def tiny_gpt2():
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=64)
    return transformers.GPT2LMHeadModel(config)


def gpt2_step_seconds(best_pair, torch):
    cpu_model = tiny_gpt2()
    device_model = copy.deepcopy(cpu_model).to("simhpu")
    ids = torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(1))
    steps = 5

    def trainer(model, device):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        batch = ids.to(device)

        def run():
            for _ in range(steps):
                model(input_ids=batch, labels=batch).loss.backward()
                opt.step()
                opt.zero_grad()
            if device == "simhpu":
                torch.simhpu.synchronize()
        return run, opt, batch

    cpu_run, _, _ = trainer(cpu_model, "cpu")
    device_run, opt, batch = trainer(device_model, "simhpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu, ours = best_pair(cpu_run, device_run, steps)
        with torch.simhpu.op_routes() as routes:
            device_model(input_ids=batch, labels=batch).loss.backward()
            opt.step()
            opt.zero_grad()
    waits = {op: n["synchronized"] for op, n in routes.counts.items()
             if n["synchronized"] and op not in ("aten::_local_scalar_dense", "aten::_copy_from")}
    return cpu, ours, waits


def rows(Row, best_pair, torch):
    cpu, ours = exp_launch_seconds(best_pair, torch)
    result = [Row("reference-path launch: torch.exp, 8 elements", "us", cpu * 1e6, ours * 1e6, "ratio <= 2.0")]
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers is not installed (requirements-test.txt): no GPT-2 rows")
        return result
    cpu, ours, waits = gpt2_step_seconds(best_pair, torch)
    result.append(Row("tiny GPT-2 training step (2x128, batch 8x64)", "ms", cpu * 1e3, ours * 1e3, "ratio <= 1.0"))
    result.append(Row("host synchronisations in that step", "count", math.nan, sum(waits.values()), "value <= 0"))
    if waits:
        print("synchronising ops in the GPT-2 step:", waits)
    return result
