"""Device memory: the caching allocator, its statistics, the capacity limit,
and strict mode (host code must not touch device memory)."""
import os
import subprocess
import sys

import pytest
import torch

import torch_simhpu
from helpers import run_python

MiB = 1 << 20



def test_freed_blocks_are_cached_and_reused():
    torch.simhpu.empty_cache()
    x = torch.empty(MiB, device="simhpu")
    ptr = x.data_ptr()
    reserved = torch.simhpu.memory_reserved()
    allocated = torch.simhpu.memory_allocated()
    del x
    assert torch.simhpu.memory_allocated() == allocated - 4 * MiB
    assert torch.simhpu.memory_reserved() == reserved  # kept for reuse
    y = torch.empty(MiB, device="simhpu")
    assert y.data_ptr() == ptr  # served from the cache
    del y
    torch.simhpu.empty_cache()
    assert torch.simhpu.memory_reserved() == torch.simhpu.memory_allocated()


def test_statistics_and_peaks():
    torch.simhpu.synchronize()
    torch.simhpu.reset_peak_memory_stats()
    base = torch.simhpu.memory_allocated()
    x = torch.empty(2 * MiB, device="simhpu")
    del x
    assert torch.simhpu.max_memory_allocated() == base + 8 * MiB
    torch.simhpu.reset_peak_memory_stats()
    assert torch.simhpu.max_memory_allocated() == base
    stats = torch.simhpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == base
    assert stats["reserved_bytes.all.current"] >= base
    free, total = torch.simhpu.mem_get_info()
    assert total == torch_simhpu._C._memory_limit() and 0 < free <= total


def test_devices_account_separately():
    before = (torch.simhpu.memory_allocated(0), torch.simhpu.memory_allocated(1))
    x = torch.empty(MiB, device="simhpu:1")
    assert torch.simhpu.memory_allocated(0) == before[0]
    assert torch.simhpu.memory_allocated(1) == before[1] + 4 * MiB
    del x


def test_out_of_memory_names_the_request_and_recovers(tmp_path):
    code = (
        "import torch, torch_simhpu\n"
        "held = [torch.empty(8 << 20, dtype=torch.uint8, device='simhpu') for _ in range(7)]\n"
        "try:\n"
        "    torch.empty(16 << 20, dtype=torch.uint8, device='simhpu')\n"
        "except torch.OutOfMemoryError as e:\n"
        "    print('OOM:', e)\n"
        "del held\n"
        "x = torch.ones(16 << 20, dtype=torch.uint8, device='simhpu')\n"  # the cache is returned and reused
        "print('after freeing:', int(x.sum().item()))\n"
    )
    out = run_python(code, tmp_path, SIMHPU_MEMORY_LIMIT="64MiB")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("OOM: simhpu: out of memory on device 0: tried to allocate 16.00 MiB, but only 8.00 MiB "
                        "of 64.00 MiB is free (56.00 MiB held by tensors). Free some tensors, or raise "
                        "SIMHPU_MEMORY_LIMIT.")
    assert lines[1] == f"after freeing: {16 << 20}"


def test_out_of_memory_in_the_middle_of_a_loop(tmp_path):
    code = (
        "import torch, torch_simhpu\n"
        "xs = []\n"
        "try:\n"
        "    for i in range(100):\n"
        "        xs.append(torch_simhpu.npu_add_custom(torch.ones(MB, device='simhpu'), torch.ones(MB, device='simhpu')))\n"
        "except torch.OutOfMemoryError:\n"
        "    print('oom at', i)\n"
        "xs.clear()\n"
        "torch.simhpu.synchronize()\n"
        "print(torch.simhpu.memory_allocated())\n"
    ).replace("MB", str(1 << 20))
    out = run_python(code, tmp_path, SIMHPU_MEMORY_LIMIT="32MiB")
    assert out.returncode == 0, out.stderr
    oom, allocated = out.stdout.splitlines()
    assert oom.startswith("oom at ") and int(oom.split()[-1]) < 8
    assert allocated == "0"


@pytest.mark.parametrize("limit", ["lots", "-5MB", "inf", "nan", "infGB"])
def test_bad_memory_limit_is_reported(tmp_path, limit):
    out = run_python("import torch, torch_simhpu\ntorch.empty(1, device='simhpu')\n", tmp_path,
                     SIMHPU_MEMORY_LIMIT=limit)
    assert out.returncode != 0
    assert f"SIMHPU_MEMORY_LIMIT must be a size such as 512MB, 2GB, 1GiB or 1TiB, got '{limit}'" in out.stderr


@pytest.mark.parametrize("limit", ["1e30", "0.5B", "100", "100000GiB"])
def test_memory_limit_out_of_range_is_reported(tmp_path, limit):
    out = run_python("import torch, torch_simhpu\ntorch.empty(1, device='simhpu')\n", tmp_path,
                     SIMHPU_MEMORY_LIMIT=limit)
    assert out.returncode != 0
    assert f"SIMHPU_MEMORY_LIMIT must be from 4KiB to 16384GiB with 2 device(s), got '{limit}'" in out.stderr


@pytest.mark.parametrize("limit, expected", [("1TiB", 1 << 40), ("2TB", 2 * 10**12), ("16TiB", 16 << 40)])
def test_memory_limit_in_terabytes(tmp_path, limit, expected):
    out = run_python("import torch, torch_simhpu\nprint(torch.simhpu.mem_get_info()[1])\n", tmp_path,
                     SIMHPU_MEMORY_LIMIT=limit)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == expected


def test_strict_mode_is_on_in_the_test_suite():
    assert torch_simhpu._C._strict_mode()


def test_strict_mode_catches_host_code_reading_device_memory(tmp_path):
    code = (
        "import ctypes, torch, torch_simhpu\n"
        "x = torch.ones(4, device='simhpu')\n"
        "print(x.cpu().tolist(), flush=True)\n"  # copies and kernels reach device memory fine
        "ctypes.c_float.from_address(x.data_ptr()).value\n"  # host code must not
    )
    out = run_python(code, tmp_path, SIMHPU_STRICT="1")
    assert out.stdout.strip() == "[1.0, 1.0, 1.0, 1.0]"
    assert out.returncode == -11  # SIGSEGV
    assert "simhpu strict mode: host code dereferenced device memory at 0x" in out.stderr
    assert "Copy it to the host first, e.g. tensor.cpu()." in out.stderr


def test_without_strict_mode_device_memory_is_plain_memory(tmp_path):
    code = (
        "import ctypes, torch, torch_simhpu\n"
        "x = torch.full((4,), 3.0, device='simhpu')\n"
        "torch.simhpu.synchronize()\n"
        "print(ctypes.c_float.from_address(x.data_ptr()).value)\n"
    )
    out = run_python(code, tmp_path, SIMHPU_STRICT="0")
    assert out.returncode == 0 and out.stdout.strip() == "3.0"


def test_pinned_host_memory():
    x = torch.randn(100)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and not x.is_pinned()
    assert torch.empty(10, pin_memory=True).is_pinned()
    assert pinned[10:].is_pinned()  # a view into a pinned block
    torch.testing.assert_close(pinned, x)


def _busy(microseconds=300_000):
    torch_simhpu._C._sleep_on_device(torch.empty(1, device="simhpu"), microseconds)


def test_non_blocking_copy_from_pinned_memory_is_queued():
    host = torch.randn(1000).pin_memory()
    _busy()
    device = host.to("simhpu", non_blocking=True)  # queued behind the busy kernel, not waited for
    assert not torch.simhpu.current_stream().query()
    torch.simhpu.synchronize()
    torch.testing.assert_close(device.cpu(), host)


def test_non_blocking_copy_to_pinned_memory_overlaps_until_synchronized():
    device = torch.randn(1000).simhpu()
    expected = device.cpu()
    out = torch.zeros(1000, pin_memory=True)
    _busy()
    out.copy_(device, non_blocking=True)  # returns at once; the data arrives later
    assert not torch.simhpu.current_stream().query()
    torch.simhpu.synchronize()
    torch.testing.assert_close(out, expected)


def test_blocking_copy_to_pageable_memory_waits():
    device = torch.randn(1000).simhpu()
    _busy(50_000)
    out = torch.zeros(1000)
    out.copy_(device, non_blocking=True)  # pageable: there is no overlap to have, so it waits
    assert torch.simhpu.current_stream().query()
    torch.testing.assert_close(out, device.cpu())


def test_memory_kept_by_finished_launches_is_reclaimed_before_out_of_memory(tmp_path):
    """A launch record keeps its tensors' memory until the launching side clears
    the finished slot; when the device is full the allocator clears them first."""
    code = (
        "import torch, torch_simhpu\n"
        "for i in range(50):\n"
        "    x = torch.ones(6 * MB // 4 * 4, device='simhpu')\n"  # 24 MiB
        "    y = torch_simhpu.npu_add_custom(x, x)\n"            # 24 MiB more
        "    del x, y\n"
        "torch.simhpu.synchronize()\n"
        "print(torch.simhpu.memory_allocated())\n"
    ).replace("MB", str(1 << 20))
    out = run_python(code, tmp_path, SIMHPU_MEMORY_LIMIT="64MiB")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


# Memory history and snapshots (torch.cuda.memory's private API, PyTorch's visualiser format) -----

@pytest.fixture
def history():
    torch.simhpu.synchronize()
    torch.simhpu.memory._record_memory_history("all")
    yield torch.simhpu.memory
    torch.simhpu.memory._record_memory_history(None)


def allocate_for_the_snapshot():  # a named frame the recorded stacks must show
    return torch.empty(3 << 20, dtype=torch.uint8, device="simhpu")


def test_snapshot_records_allocations_and_frees_with_their_python_stacks(history):
    kept = allocate_for_the_snapshot()
    freed = allocate_for_the_snapshot()
    address = freed.data_ptr()
    del freed
    snapshot = history._snapshot()
    events = snapshot["device_traces"][0]
    allocs = [e for e in events if e["action"] == "alloc" and e["size"] >= 3 << 20]
    assert len(allocs) == 2
    assert any(f["name"] == "allocate_for_the_snapshot" and f["filename"] == __file__ for f in allocs[0]["frames"])
    assert any(e["action"] == "free_completed" and e["addr"] == address for e in events)
    segment = next(s for s in snapshot["segments"] if s["address"] == kept.data_ptr())
    block = segment["blocks"][0]
    assert block["state"] == "active_allocated" and block["size"] >= 3 << 20
    assert any(f["name"] == "allocate_for_the_snapshot" for f in block["frames"])
    freed_segment = next(s for s in snapshot["segments"] if s["address"] == address)
    assert freed_segment["blocks"][0]["state"] == "inactive"  # cached for reuse
    assert sum(s["allocated_size"] for s in snapshot["segments"] if s["device"] == 0) == \
        torch.simhpu.memory_allocated(0)


def test_pytorchs_memory_visualiser_reads_the_dumped_snapshot(history, tmp_path):
    import pickle

    from torch.cuda import _memory_viz
    x = allocate_for_the_snapshot()
    y = x.float() * 2  # a kernel's output, allocated by the launching thread
    del x
    path = tmp_path / "snapshot.pickle"
    history._dump_snapshot(str(path))
    snapshot = pickle.loads(path.read_bytes())
    assert "<html" in _memory_viz.trace_plot(snapshot)
    assert "<html" in _memory_viz.segment_plot(snapshot)
    assert "segment" in _memory_viz.segsum(snapshot).lower()
    del y


def test_history_stops_and_forgets(history):
    allocate_for_the_snapshot()
    history._record_memory_history(None)
    assert history._snapshot()["device_traces"][0] == []
    allocate_for_the_snapshot()
    assert history._snapshot()["device_traces"][0] == []


@pytest.mark.parametrize("kwargs, message", [({"enabled": "everything"}, "enabled must be"),
                                             ({"stacks": "cpp"}, "stacks must be"),
                                             ({"max_entries": 0}, "max_entries must be")])
def test_bad_history_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        torch.simhpu.memory._record_memory_history(**kwargs)


def test_max_entries_keeps_the_newest_events(history):
    history._record_memory_history("all", max_entries=3)
    for _ in range(5):
        allocate_for_the_snapshot()
    assert len(history._snapshot()["device_traces"][0]) == 3


def test_a_long_history_keeps_one_copy_of_each_stack(history):
    """A training loop allocates from the same stacks step after step: 40,000 allocations from
    one deep stack cost their events, not 40,000 copies of its frames (~3 KB each: 120 MB).
    (Measured against the same loop unrecorded: the tensors cost what they cost, and a lens
    that is on, the sanitizer, its own.) Between allocations the host's heap is churned with
    random bytes, as a real program's other work churns it: a stack is found again by what
    it is, not by what the memory it was walked into happened to hold."""
    def churned_empty():
        for size in (300, 600, 1200):  # (the sizes a walk of ~30 frames allocates)
            del_me = os.urandom(size)
            del del_me
        return torch.empty(16, device="simhpu")

    def deep(n):
        return deep(n - 1) if n else [churned_empty() for _ in range(40_000)]

    def growth() -> int:
        before = _resident_bytes()
        kept = deep(30)
        grown = _resident_bytes() - before
        del kept
        return grown

    history._record_memory_history(None)
    growth()  # (warms the allocator's cache and the interpreter's)
    unrecorded = growth()
    history._record_memory_history("all")
    recorded = growth()
    events = torch_simhpu._C._memory_event_list(0)
    last_alloc = max(i for i, (action, _, _) in enumerate(events) if action == "alloc")
    frames = torch_simhpu._C._memory_event_frames(0, [last_alloc])[0]
    assert len(events) >= 80_000 and len(frames) > 30 and frames[3]["name"] == "deep"
    assert recorded - unrecorded < 20 * 2**20, (recorded, unrecorded)


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_out_of_memory_writes_a_snapshot_when_asked(tmp_path):
    path = tmp_path / "oom.pickle"
    code = ("import pickle, torch, torch_simhpu\n"
            "keep = torch.empty(40 << 20, dtype=torch.uint8, device='simhpu')\n"
            "try:\n"
            "    torch.empty(40 << 20, dtype=torch.uint8, device='simhpu')\n"
            "except torch.OutOfMemoryError:\n"
            "    print('oom')\n"
            f"snapshot = pickle.load(open({str(path)!r}, 'rb'))\n"
            "actions = [e['action'] for e in snapshot['device_traces'][0]]\n"
            "print(actions[-1], any(s['address'] == keep.data_ptr() for s in snapshot['segments']))\n")
    out = run_python(code, tmp_path, SIMHPU_MEMORY_LIMIT="64MiB", SIMHPU_OOM_SNAPSHOT=str(path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["oom", "oom", "True"]
    assert f"memory snapshot written to {path}" in out.stderr
