"""Rows for what CUDA's contract costs on the device (issue 37): freeing a
storage in place while the device is busy (FSDP's reshard) never waits for the
device, and pinning host memory is cached as PyTorch's caching host allocator
caches it.

- untyped_storage().resize_(0) of a 4 MiB tensor with 20 ms of work queued on
  its stream, against the same call on a CPU tensor (the host must not wait);
- pin, touch and free 4 KiB and 1 MiB of host memory, against pageable memory.

    python benchmarks/copies_and_frees.py      these rows alone
"""
import math
import time


def _resize_while_busy(torch, device, rounds=5):
    """Seconds the resize_(0) call takes, best of `rounds`; the device's queued work is not timed."""
    import torch_simhpu

    best = math.inf
    for _ in range(rounds):
        t = torch.ones(1 << 20, device=device)
        if device != "cpu":
            torch_simhpu._C._sleep_on_device(t, 20_000)  # the stream is busy for 20 ms
        start = time.perf_counter()
        t.untyped_storage().resize_(0)
        best = min(best, time.perf_counter() - start)
        if device != "cpu":
            torch.simhpu.synchronize()
    return best


def _pin_and_free(torch, nbytes, pinned, n=500):
    def run():
        for _ in range(n):
            x = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
            x[0] = 1
            del x
    return run


def rows(Row, best_pair, torch):
    cpu, device = _resize_while_busy(torch, "cpu"), _resize_while_busy(torch, "simhpu")
    result = [Row("resize_(0) of a 4 MiB storage, its stream busy 20 ms", "us", cpu * 1e6, device * 1e6,
                  "value <= 100")]
    for nbytes, label in ((4096, "4 KiB"), (1 << 20, "1 MiB")):
        n = 500
        pageable, pinned = best_pair(_pin_and_free(torch, nbytes, False, n), _pin_and_free(torch, nbytes, True, n), n)
        result.append(Row(f"pin + touch + free {label} vs pageable memory", "us", pageable * 1e6, pinned * 1e6,
                          "ratio <= 3.0"))
    return result


if __name__ == "__main__":
    import torch

    import torch_simhpu  # noqa: F401
    from tables import Row, best_pair, print_table  # noqa: E402

    print_table(rows(Row, best_pair, torch))
