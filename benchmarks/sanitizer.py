"""Rows for the stream sanitizer (torch.simhpu.sanitizer): what checking every
launch costs, off against on, measured in alternating rounds in one process.

- launch of a 1-element custom op (npu_add_custom), 100,000 launches then synchronize;
- an eager training step of a tiny GPT-2 (2 layers, 128 wide, batch 8x64, AdamW).

    python benchmarks/sanitizer.py      these rows alone
"""


def _with_sanitizer(torch, on, fn):
    def run():
        if on:
            torch.simhpu.sanitizer.enable()
        try:
            fn()
            torch.simhpu.synchronize()
        finally:
            torch.simhpu.sanitizer.disable()
    return run


def rows(Row, best_pair, torch):
    import torch_simhpu

    n = 100_000
    a, b = torch.ones(1, device="simhpu"), torch.ones(1, device="simhpu")

    def launches():
        for _ in range(n):
            torch_simhpu.npu_add_custom(a, b)

    off, on = best_pair(_with_sanitizer(torch, False, launches), _with_sanitizer(torch, True, launches), n)
    result = [Row("launch of a 1-element op, sanitizer off (left) / on", "us", off * 1e6, on * 1e6, "ratio <= 3.0")]

    try:
        from tiny_gpt2 import training_step
        step = training_step("simhpu")
    except ImportError:
        return result

    off, on = best_pair(_with_sanitizer(torch, False, step), _with_sanitizer(torch, True, step), 1)
    result.append(Row("tiny GPT-2 eager training step, sanitizer off (left) / on", "ms", off * 1e3, on * 1e3,
                      "ratio <= 1.5"))
    return result


if __name__ == "__main__":
    import torch

    from tables import Row, best_pair, print_table  # noqa: E402

    print_table(rows(Row, best_pair, torch))
