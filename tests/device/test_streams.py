"""Streams and events: independent queues that overlap, ordering between them
with events, timing, record_stream, fork safety, and many threads at once."""
import gc
import os
import subprocess
import sys
import threading

import pytest
import torch

import torch_simhpu

SLOW_US = 300_000  # long enough that a stream is surely still busy while we look


def busy(stream, microseconds=SLOW_US):
    """Occupy `stream` for a while."""
    with torch.simhpu.stream(stream):
        torch_simhpu._C._sleep_on_device(torch.empty(1, device="simhpu"), microseconds)


def test_current_default_and_set_stream():
    default = torch.simhpu.current_stream()
    assert default == torch.simhpu.default_stream() and default.stream_id == 0
    s = torch.simhpu.Stream()
    assert s.device == torch.device("simhpu", 0) and s.stream_id != 0
    with torch.simhpu.stream(s):
        assert torch.simhpu.current_stream() == s
        assert torch.accelerator.current_stream() == s
    assert torch.simhpu.current_stream() == default
    torch.simhpu.set_stream(s)
    try:
        assert torch.simhpu.current_stream() == s
    finally:
        torch.simhpu.set_stream(default)
    assert torch.simhpu.Stream(device="simhpu:1").device_index == 1


def test_current_stream_is_per_thread():
    s = torch.simhpu.Stream()
    seen = []
    with torch.simhpu.stream(s):
        t = threading.Thread(target=lambda: seen.append(torch.simhpu.current_stream()))
        t.start()
        t.join()
    assert seen == [torch.simhpu.default_stream()]


def test_streams_run_independently():
    slow, fast = torch.simhpu.Stream(), torch.simhpu.Stream()
    assert slow != fast
    busy(slow)
    with torch.simhpu.stream(fast):
        y = torch_simhpu.npu_add_custom(torch.ones(3, device="simhpu"), torch.ones(3, device="simhpu"))
    fast.synchronize()  # returns although `slow` is still running
    assert not slow.query()
    torch.testing.assert_close(y.cpu(), torch.full((3,), 2.0))
    slow.synchronize()
    assert slow.query()


def write_later(stream, x, value):
    """On `stream`: a long kernel, then `x` = value, all queued without the host
    waiting (npu_lerp_scalar_ is an asynchronous device kernel). A consumer that
    does not wait for `stream` reads `x` before the write lands."""
    source = torch.full(x.shape, float(value), device="simhpu")
    torch.simhpu.synchronize()
    busy(stream, 100_000)
    with torch.simhpu.stream(stream):
        torch_simhpu.npu_lerp_scalar_(x, source, 1.0)
    source.record_stream(stream)  # freed on return, while `stream` may still read it


def test_without_a_wait_the_consumer_runs_ahead():
    """The control for the ordering tests below: they would fail if waiting did nothing.
    (It races on purpose: the sanitizer, when on, is off for it.)"""
    producer, consumer = torch.simhpu.Stream(), torch.simhpu.Stream()
    x = torch.zeros(1000, device="simhpu")
    with torch.simhpu.sanitizer.disabled():
        write_later(producer, x, 1.0)
        with torch.simhpu.stream(consumer):
            y = torch_simhpu.npu_add_custom(x, x)
        consumer.synchronize()
        assert not producer.query()
        torch.testing.assert_close(y.cpu(), torch.zeros(1000))
    producer.synchronize()


@pytest.mark.parametrize("wait", [
    lambda event, stream: stream.wait_event(event),  # torch.simhpu.Stream.wait_event
    lambda event, stream: event.wait(stream),         # torch.simhpu.Event.wait
], ids=["stream.wait_event", "event.wait"])
def test_waiting_on_an_event_orders_work_across_streams(wait):
    producer, consumer = torch.simhpu.Stream(), torch.simhpu.Stream()
    x = torch.zeros(1000, device="simhpu")
    write_later(producer, x, 1.0)
    ready = torch.simhpu.Event()
    ready.record(producer)
    wait(ready, consumer)
    with torch.simhpu.stream(consumer):
        y = torch_simhpu.npu_add_custom(x, x)
    consumer.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((1000,), 2.0))


def test_wait_stream():
    a, b = torch.simhpu.Stream(), torch.simhpu.Stream()
    x = torch.zeros(10, device="simhpu")
    write_later(a, x, 3.0)
    b.wait_stream(a)
    with torch.simhpu.stream(b):
        y = torch_simhpu.npu_swish(x, beta=0.0)  # x * sigmoid(0) = 1.5
    b.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((10,), 1.5))


def test_event_query_synchronize_and_elapsed_time():
    s = torch.simhpu.Stream()
    start, end = torch.simhpu.Event(enable_timing=True), torch.simhpu.Event(enable_timing=True)
    assert start.query()  # never recorded
    with torch.simhpu.stream(s):
        start.record()
        torch_simhpu._C._sleep_on_device(torch.empty(1, device="simhpu"), 50_000)
        end.record()
    assert not end.query()
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 49.0  # milliseconds, at least the kernel's 50 ms


def test_record_stream_keeps_memory_until_the_stream_is_past_it():
    side = torch.simhpu.Stream()
    x = torch.empty(1 << 18, device="simhpu")
    ptr = x.data_ptr()
    busy(side)
    with torch.simhpu.stream(side):
        torch_simhpu.npu_add_custom(x, x)  # x is now in use on `side`
    x.record_stream(side)
    del x
    y = torch.empty(1 << 18, device="simhpu")
    assert y.data_ptr() != ptr  # not reused while `side` may still read it
    side.synchronize()
    reserved = torch.simhpu.memory_reserved()
    z = torch.empty(1 << 18, device="simhpu")
    assert torch.simhpu.memory_reserved() == reserved  # once `side` is past, x's block serves z
    del y, z


def test_kernel_failure_on_one_stream_leaves_others_working():
    bad, good = torch.simhpu.Stream(), torch.simhpu.Stream()
    x, other = torch.ones(2, device="simhpu"), torch.ones(2, device="simhpu")
    torch.simhpu.synchronize()
    with torch.simhpu.stream(bad):
        torch_simhpu._C._launch_failing_kernel(x)
    with torch.simhpu.stream(good):
        y = torch_simhpu.npu_add_custom(other, other)
    good.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((2,), 2.0))
    with pytest.raises(RuntimeError, match="fail_on_device"):
        bad.synchronize()
    bad.synchronize()


def test_device_synchronize_reports_the_failures_of_every_stream_at_once():
    """A kernel on a second stream that reads what a failed kernel left undefined
    is skipped; one device synchronisation reports both, and the next is clean."""
    first, second = torch.simhpu.Stream(), torch.simhpu.Stream()
    x = torch.ones(4, device="simhpu")
    torch.simhpu.synchronize()
    with torch.simhpu.stream(first):
        torch_simhpu._C._launch_failing_kernel(x)
        done = first.record_event()
    with torch.simhpu.stream(second):
        second.wait_event(done)
        x.add_(1)
    with pytest.raises(RuntimeError) as raised:
        torch.simhpu.synchronize()
    message = str(raised.value)
    assert "fail_on_device" in message and "was not run" in message, message
    torch.simhpu.synchronize()
    y = torch.ones(4, device="simhpu") * 3
    torch.testing.assert_close(y.cpu(), torch.full((4,), 3.0))


def test_ring_comes_round_over_records_that_hold_nothing():
    """Slots that hold no storage are cleared only when the ring comes round to them, and
    finished launches' storages are released in batches: thousands of empty records
    between real launches, over several turns of the 1,024-slot ring, keep the results
    and the memory right."""
    gc.collect()
    torch.simhpu.synchronize()
    baseline = torch.simhpu.memory_allocated()
    acc = torch.zeros(1000, device="simhpu")
    one = torch.ones(1000, device="simhpu")
    for turn in range(6):
        torch_simhpu._C._launch_empty_kernels(700 + 37 * turn)  # not a multiple of the ring
        for _ in range(5 + turn):
            acc = torch_simhpu.npu_add_custom(acc, one)
            torch_simhpu.npu_add_custom(acc, one)  # a temporary Python drops at once
    torch.testing.assert_close(acc.cpu(), torch.full((1000,), float(sum(5 + t for t in range(6)))))
    del acc, one
    torch.simhpu.synchronize()
    assert torch.simhpu.memory_allocated() == baseline


def test_many_threads_on_two_streams():
    """8 Python threads launch 10,000 ops across 2 streams: results right, no memory left behind."""
    # Tensors of earlier tests held by reference cycles (tracebacks of expected
    # errors) would otherwise be freed in the middle and lower the count.
    gc.collect()
    torch.simhpu.synchronize()
    baseline = torch.simhpu.memory_allocated()
    streams = [torch.simhpu.Stream(), torch.simhpu.Stream()]
    results, errors = {}, []

    def worker(i):
        try:
            with torch.simhpu.stream(streams[i % 2]):
                acc = torch.zeros(64, device="simhpu")
                one = torch.ones(64, device="simhpu")
                for _ in range(1250):
                    acc = torch_simhpu.npu_add_custom(acc, one)
                results[i] = acc.cpu()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(8):
        torch.testing.assert_close(results[i], torch.full((64,), 1250.0))
    results.clear()
    gc.collect()
    torch.simhpu.synchronize()
    assert torch.simhpu.memory_allocated() == baseline


FULL_RING_AND_A_SECOND_THREAD = """
import threading, time, torch, torch_simhpu
s = torch.simhpu.Stream()
one = torch.ones(8, device="simhpu")
s.wait_stream(torch.simhpu.current_stream())  # `one` is written on the default stream

def second():
    time.sleep(0.05)  # by then the main thread waits for room in the full ring
    with torch.simhpu.stream(s):
        for _ in range(200):
            torch_simhpu.npu_add_custom(one, one)  # with the GIL held: takes the lock from the owner

thread = threading.Thread(target=second)
thread.start()
with torch.simhpu.stream(s):
    torch_simhpu._C._sleep_on_device(torch.empty(1, device="simhpu"), 300_000)
    for _ in range(3000):  # fills the ring behind the sleeping kernel, then waits for room
        torch_simhpu.npu_add_custom(one, one)
thread.join()
s.synchronize()
print("done")
"""


def test_a_thread_taking_the_stream_from_an_owner_waiting_for_room_lets_it_go_on(tmp_path):
    # The owner waits for room in a full ring without the GIL, inside the
    # producers' lock, and needs the GIL back to leave it; a second thread that
    # takes the lock from it must not wait for it holding the GIL.
    done = subprocess.run([sys.executable, "-c", FULL_RING_AND_A_SECOND_THREAD], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-3000:]


def test_fork_after_start_gives_a_clear_error(tmp_path):
    code = (
        "import os, torch, torch_simhpu\n"
        "x = torch.ones(2, device='simhpu') + 1\n"  # the runtime has started
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        torch.ones(2, device='simhpu')\n"
        "    except RuntimeError as e:\n"
        "        print('child:', torch.simhpu._is_in_bad_fork(), str(e).splitlines()[0], flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print('parent:', torch.simhpu._is_in_bad_fork(), x.cpu().tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    child, parent = out.stdout.strip().splitlines()
    assert child.startswith("child: True simhpu: the device cannot be used in a process forked after the simhpu "
                            "runtime started")
    assert parent == "parent: False [2.0, 2.0]"


def test_more_launches_than_the_queue_holds():
    """A producer that fills a stream's queue waits for room (without the GIL), then goes on."""
    s = torch.simhpu.Stream()
    busy(s, 100_000)
    with torch.simhpu.stream(s):
        acc = torch.zeros(8, device="simhpu")
        one = torch.ones(8, device="simhpu")
        for _ in range(5000):  # more than the queue's 1024 records
            acc = torch_simhpu.npu_add_custom(acc, one)
    s.synchronize()
    torch.testing.assert_close(acc.cpu(), torch.full((8,), 5000.0))
