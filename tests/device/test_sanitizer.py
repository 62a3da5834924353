"""The stream sanitizer: each race below is found at its launch, naming the
operator, both streams, both lines and the tensor; each correctly synchronised
twin runs clean. The writes are ordinary asynchronous launches: nothing in a
race scenario synchronises the host by accident."""
import re

import pytest
import torch

import torch_simhpu

sanitizer = torch.simhpu.sanitizer
D = "simhpu"


@pytest.fixture(autouse=True)
def _sanitizer_on():
    torch.simhpu.synchronize()
    with sanitizer.enabled("raise"):
        yield
    sanitizer.clear_reports()


def side():
    """A new stream that has waited for what the current stream launched so far
    (as correct code makes a side stream wait before it reads the inputs)."""
    s = torch.simhpu.Stream()
    s.wait_stream(torch.simhpu.current_stream())
    return s


def race(fragments=()):
    """Expects the sanitizer to raise inside the block, with `fragments` in its message."""
    return pytest.raises(RuntimeError, match=r"simhpu sanitizer: (?s:.*)" + "".join(
        f"(?=(?s:.*){re.escape(f)})" for f in fragments))


def line_of(marker):
    with open(__file__) as f:
        return next(n for n, line in enumerate(f, 1) if line.rstrip().endswith(marker))


def test_missing_wait_stream_is_found_with_both_operators_streams_lines_and_the_tensor():
    x = torch.ones(4, 4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2  # [the side stream writes y]
    with pytest.raises(RuntimeError) as caught:
        y.add_(1)  # [the default stream writes y, with nothing ordering it after the side stream]
    message = str(caught.value)
    write, rewrite = line_of("[the side stream writes y]"), line_of("after the side stream]")
    assert message.startswith(f"simhpu sanitizer: aten::add.out on simhpu:0 stream 0 (at {__file__}:{rewrite}) "
                              f"writes a Float tensor of shape [4, 4] that aten::mul.Tensor on simhpu:0 stream "
                              f"{s.stream_id} (at {__file__}:{write}) wrote, and nothing orders the two; "
                              f"the memory was allocated at {__file__}:{write}. Make simhpu:0 stream 0 wait for "
                              f"simhpu:0 stream {s.stream_id}"), message


def test_wait_stream_orders_the_two():
    x = torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2
    torch.simhpu.current_stream().wait_stream(s)
    y.add_(1)
    torch.testing.assert_close(y.cpu(), torch.full((4,), 3.0))


def test_an_event_recorded_but_never_waited_orders_nothing():
    x = torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2
        s.record_event()
    with race(["aten::add.out", "aten::mul.Tensor"]):
        y.add_(1)


def test_waiting_for_the_event_orders_the_two():
    x = torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2
        event = s.record_event()
    torch.simhpu.current_stream().wait_event(event)
    y.add_(1)
    torch.testing.assert_close(y.cpu(), torch.full((4,), 3.0))


def test_waiting_for_an_event_recorded_before_the_write_is_not_enough():
    x = torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        before = s.record_event()
        y = x * 2
    torch.simhpu.current_stream().wait_event(before)
    with race(["aten::mul.Tensor"]):
        y.add_(1)


def test_two_streams_writing_one_tensor_race():
    x = torch.zeros(8, device=D)
    torch.simhpu.synchronize()
    s = side()
    x.fill_(1)
    with torch.simhpu.stream(s), race(["aten::fill_.Scalar", "writes", "wrote"]):
        x.fill_(2)


def test_a_write_after_another_streams_read_races():
    x = torch.ones(8, device=D)
    torch.simhpu.synchronize()
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2  # reads x
    with race(["aten::add.out", "writes", "aten::mul.Tensor", "read"]):
        x.add_(1)
    del y


def test_reads_on_two_streams_do_not_race():
    x = torch.ones(8, device=D)
    torch.simhpu.synchronize()
    s = side()
    with torch.simhpu.stream(s):
        a = x * 2
    b = x * 3
    torch.simhpu.synchronize()
    assert float(a.sum().cpu() + b.sum().cpu()) == 40.0


def test_disjoint_slices_of_one_tensor_on_two_streams_do_not_race():
    x = torch.zeros(8, device=D)
    torch.simhpu.synchronize()
    s = side()
    x[:4].fill_(1)
    with torch.simhpu.stream(s):
        x[4:].fill_(2)
    torch.simhpu.synchronize()
    torch.testing.assert_close(x.cpu(), torch.tensor([1.0] * 4 + [2.0] * 4))


def test_overlapping_slices_on_two_streams_race():
    x = torch.zeros(8, device=D)
    torch.simhpu.synchronize()
    s = side()
    x[:5].fill_(1)
    with torch.simhpu.stream(s), race(["aten::fill_.Scalar"]):
        x[4:].fill_(2)


def test_the_host_reading_what_a_side_stream_wrote_races():
    x = torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2
    with race(["aten::_copy_from on the host", "reads", "aten::mul.Tensor"]):
        y.cpu()  # synchronises the current stream only


def test_the_host_reading_after_synchronising_the_side_stream_is_clean():
    x = torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2
    s.synchronize()
    torch.testing.assert_close(y.cpu(), torch.full((4,), 2.0))


def test_a_custom_npu_op_on_a_side_stream_races_like_any_kernel():
    x, y = torch.ones(4, device=D), torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        z = torch_simhpu.npu_add_custom(x, y)
    with race(["aten::mul.out", "npu_add_custom"]):
        z.mul_(2)


def test_a_reference_path_op_on_a_side_stream_races_like_any_kernel():
    x = torch.ones(4, 4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        c = torch.cumsum(x, 0)  # the reference path
    with race(["aten::cumsum"]):
        c.add_(1)


def test_record_mode_keeps_every_race_and_lets_the_program_go_on():
    sanitizer.enable("record")
    x = torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2
    y.add_(1)
    y.add_(1)  # the default stream's own later write: ordered after its first
    torch.simhpu.synchronize()
    found = sanitizer.reports()
    assert len(found) == 1 and "aten::add.out" in found[0] and "aten::mul.Tensor" in found[0]
    torch.testing.assert_close(y.cpu(), torch.full((4,), 4.0))


def test_turning_it_on_assumes_what_ran_before_was_ordered():
    sanitizer.disable()
    x = torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2
    sanitizer.enable()
    torch.simhpu.current_stream().wait_stream(s)
    y.add_(1)
    torch.testing.assert_close(y.cpu(), torch.full((4,), 3.0))


def test_off_it_sees_nothing():
    sanitizer.disable()
    assert not sanitizer.is_enabled()
    x = torch.ones(4, device=D)
    s = side()
    with torch.simhpu.stream(s):
        y = x * 2
    y.add_(1)  # a race, unreported
    torch.simhpu.synchronize()


def test_a_bad_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be 'raise' or 'record'"):
        sanitizer.enable("loud")
