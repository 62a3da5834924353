"""Stream-safe memory under the sanitizer: a tensor dropped while a stream other
than its allocation stream may still use it, without record_stream or an
ordering, is reported when its allocation stream next takes memory the block
could serve, if that use is still unordered then — no memory pressure needed —
as real hardware's caching allocator would hand the block out again to it.
Ordering the use before that allocation (the prefetcher's fix) is clean.
Poisoning makes such a late use show in the values."""
import pytest
import torch

import torch_simhpu
from helpers import line_of, race, sanitizer_left_off, side_stream  # noqa: F401  (a fixture)

sanitizer = torch.simhpu.sanitizer
D = "simhpu"


pytestmark = pytest.mark.usefixtures("sanitizer_left_off")


def stall(stream, microseconds=100_000):
    """Holds `stream` back, so what is launched on it after runs late (and nothing waits on the host)."""
    with torch.simhpu.stream(stream):
        torch_simhpu._C._sleep_on_device(torch.empty(1, device=D), microseconds)


def test_a_tensor_freed_while_a_side_stream_reads_it_is_reported_when_its_stream_allocates_again():
    sanitizer.enable("raise")
    x = torch.ones(1000, device=D)  # [allocated on the default stream]
    s = side_stream()
    with torch.simhpu.stream(s):
        y = x * 2  # [read on the side stream]
    del x  # [freed with no record_stream]
    with pytest.raises(RuntimeError) as caught:
        torch.zeros(3, device=D)
    message = str(caught.value)
    here = __file__
    assert message.startswith(
        f"simhpu sanitizer: a Float tensor of shape [1000] allocated on simhpu:0 stream 0 "
        f"(at {here}:{line_of(here, '[allocated on the default stream]')}) was freed "
        f"(at {here}:{line_of(here, '[freed with no record_stream]')}) while aten::mul.Tensor on simhpu:0 stream "
        f"{s.stream_id} (at {here}:{line_of(here, '[read on the side stream]')}), launched before, may still read "
        f"it"), message
    assert f"tensor.record_stream(simhpu:0 stream {s.stream_id})" in message
    torch.simhpu.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((1000,), 2.0))  # the device is still usable


def test_in_record_mode_the_free_is_kept_and_the_program_goes_on():
    sanitizer.enable("record")
    x = torch.ones(8, device=D)
    s = side_stream()
    with torch.simhpu.stream(s):
        x.add_(1)  # written on the side stream
    del x
    assert sanitizer.reports() == []  # not yet: nothing took the memory again
    torch.empty(8, device=D)  # [allocated again]
    found = sanitizer.reports()
    assert len(found) == 1 and "was freed" in found[0] and "may still write it" in found[0], found
    assert f"took memory again (at {__file__}:{line_of(__file__, '[allocated again]')})" in found[0], found
    torch.simhpu.synchronize()


def test_a_free_found_is_raised_by_a_synchronisation_too():
    sanitizer.enable("raise")
    x = torch.ones(8, device=D)
    s = side_stream()
    with torch.simhpu.stream(s):
        x * 2
    del x
    torch.empty(8, device=D)  # takes memory: no launch
    with race(["was freed", "aten::mul.Tensor"]):
        torch.simhpu.synchronize()


def test_the_prefetchers_fix_waiting_for_the_consumer_before_allocating_again_is_clean():
    # The producer drops a batch the consumer stream still reads, then waits for
    # the consumer before it takes memory for the next one (what data loaders do).
    sanitizer.enable("raise")
    producer, consumer = torch.simhpu.current_stream(), side_stream()
    batch = torch.ones(1000, device=D)
    consumer.wait_stream(producer)
    stall(consumer)
    with torch.simhpu.stream(consumer):
        total = batch.sum()
    del batch  # freed while the consumer may still read it
    producer.wait_stream(consumer)
    next_batch = torch.ones(1000, device=D)
    torch.simhpu.synchronize()
    assert float(total.cpu()) == 1000.0 and float(next_batch.sum().cpu()) == 1000.0


def test_memory_taken_on_another_stream_or_from_the_other_pool_is_no_reuse():
    sanitizer.enable("record")
    s, other = side_stream(), side_stream()
    x = torch.ones(1000, device=D)
    s.wait_stream(torch.simhpu.current_stream())
    with torch.simhpu.stream(s):
        y = x * 2
    del x
    with torch.simhpu.stream(other):
        torch.empty(1000, device=D)  # another stream's pool
    torch.empty(2 << 20, dtype=torch.uint8, device=D)  # a large request: not served by a small block
    assert sanitizer.reports() == []
    torch.empty(1000, device=D)  # this one could be
    assert len(sanitizer.reports()) == 1
    torch.simhpu.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((1000,), 2.0))


@pytest.mark.parametrize("ordering", ["record_stream", "wait_stream", "host synchronises", "event wait"])
def test_a_free_after_the_use_is_ordered_or_recorded_is_clean(ordering):
    sanitizer.enable("raise")
    x = torch.ones(1000, device=D)
    s = side_stream()
    with torch.simhpu.stream(s):
        y = x * 2
    if ordering == "record_stream":
        x.record_stream(s)
    elif ordering == "wait_stream":
        torch.simhpu.current_stream().wait_stream(s)
    elif ordering == "host synchronises":
        s.synchronize()
    else:
        torch.simhpu.current_stream().wait_event(s.record_event())
    del x
    z = torch.zeros(1000, device=D)  # may reuse x's block
    torch.simhpu.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((1000,), 2.0))
    assert float(z.sum().cpu()) == 0.0


def test_a_tensor_used_only_on_its_own_stream_frees_cleanly():
    sanitizer.enable("raise")
    for _ in range(3):
        x = torch.ones(100, device=D)
        y = (x * 2).sum()
        del x
    torch.simhpu.synchronize()
    assert float(y.cpu()) == 200.0


def test_a_tensor_allocated_on_a_side_stream_and_used_there_frees_cleanly():
    sanitizer.enable("raise")
    s = side_stream()
    with torch.simhpu.stream(s):
        x = torch.ones(100, device=D)
        y = x * 2
        del x
    torch.simhpu.current_stream().wait_stream(s)
    torch.testing.assert_close(y.cpu(), torch.full((100,), 2.0))


@pytest.mark.parametrize("dtype,poisoned", [(torch.float32, float("nan")), (torch.float16, float("nan")),
                                            (torch.int32, -0x5A5A5A5B), (torch.uint8, 0xA5)])
def test_poison_makes_a_read_after_the_free_show_in_the_values(dtype, poisoned):
    sanitizer.enable("record", poison=True)
    x = torch.ones(256, device=D, dtype=dtype)
    s = side_stream()
    stall(s)
    with torch.simhpu.stream(s):
        y = x.clone()  # runs after the stall: after the free, on real hardware after a reuse
    del x
    torch.zeros(1, device=D)  # the default stream's next launch: the freed block is filled before it
    torch.simhpu.synchronize()
    assert len(sanitizer.reports()) == 1
    expected = torch.full((256,), poisoned, dtype=dtype)
    torch.testing.assert_close(y.cpu(), expected, equal_nan=True)


def test_poison_leaves_a_recorded_tensor_alone():
    sanitizer.enable("record", poison=True)
    x = torch.ones(256, device=D)
    s = side_stream()
    stall(s)
    with torch.simhpu.stream(s):
        y = x.clone()
    x.record_stream(s)
    del x
    torch.zeros(1, device=D)
    torch.simhpu.synchronize()
    assert sanitizer.reports() == []
    torch.testing.assert_close(y.cpu(), torch.ones(256))


def test_poison_does_not_touch_memory_still_in_use_on_its_own_stream():
    sanitizer.enable("raise", poison=True)
    x = torch.ones(256, device=D)
    stall(torch.simhpu.current_stream())
    y = x * 3  # queued behind the stall, on x's own stream: ordered before the poison
    del x
    torch.zeros(1, device=D)
    torch.testing.assert_close(y.cpu(), torch.full((256,), 3.0))


def pinned_copy_pending():
    """A pinned buffer copied to the device with non_blocking=True behind a stall:
    the copy reads the buffer later, on the worker."""
    buffer = torch.ones(1 << 14).pin_memory()
    on_device = torch.empty(1 << 14, device=D)
    stall(torch.simhpu.current_stream())
    on_device.copy_(buffer, non_blocking=True)  # [the copy that reads the buffer later]
    return buffer, on_device


def test_a_pinned_buffer_refilled_while_its_non_blocking_copy_is_pending_is_reported():
    sanitizer.enable("record")
    buffer, on_device = pinned_copy_pending()
    buffer.fill_(7)  # refilled too soon: on real hardware the copy may read 7s
    torch.zeros(1, device=D)  # [noticed here]
    found = sanitizer.reports()
    here = __file__
    assert len(found) == 1, found
    assert found[0].startswith(
        f"simhpu sanitizer: the host wrote pinned memory (a Float tensor of shape [16384]) that aten::_copy_from on "
        f"simhpu:0 stream 0 (at {here}:{line_of(here, '[the copy that reads the buffer later]')}), launched before "
        f"with non_blocking=True, may still be reading: nothing ordered the copy before the write (noticed at "
        f"{here}:{line_of(here, '[noticed here]')})"), found[0]
    torch.simhpu.synchronize()


def test_in_raise_mode_the_refill_is_raised_at_the_next_launch():
    sanitizer.enable("raise")
    buffer, _ = pinned_copy_pending()
    buffer.fill_(7)
    with race(["the host wrote pinned memory", "aten::_copy_from"]):
        torch.zeros(1, device=D)
    torch.simhpu.synchronize()


@pytest.mark.parametrize("wait", ["event", "stream", "device"])
def test_a_pinned_buffer_refilled_after_the_copy_is_waited_for_is_clean(wait):
    sanitizer.enable("raise")
    buffer, on_device = pinned_copy_pending()
    if wait == "event":
        torch.simhpu.current_stream().record_event().synchronize()
    elif wait == "stream":
        torch.simhpu.current_stream().synchronize()
    else:
        torch.simhpu.synchronize()
    buffer.fill_(7)
    torch.zeros(1, device=D)
    torch.testing.assert_close(on_device.cpu(), torch.ones(1 << 14))


def test_a_pinned_buffer_is_writable_once_the_sanitizer_is_off_or_it_is_freed():
    sanitizer.enable("raise")
    buffer, _ = pinned_copy_pending()
    sanitizer.disable()
    buffer.fill_(2)  # no longer guarded: no fault, no report
    sanitizer.enable("raise")
    buffer, _ = pinned_copy_pending()
    del buffer  # freed while guarded: the allocator may write it again
    again = torch.ones(1 << 14).pin_memory()
    again.fill_(3)
    torch.simhpu.synchronize()
    assert sanitizer.reports() == []
