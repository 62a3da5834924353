"""The program's Python between operators, priced a line by the modelled host (a profile's
host_python_line; torch_simhpu/simulation/python_lines.py counts the lines)."""
import sys

import pytest
import torch

import torch_simhpu  # noqa: F401
from torch_simhpu import _C
from torch_simhpu.simulation import ProfileError, load_profile, part_fit, part_measure, simulate


def part(**fields) -> dict:
    """h100-sxm with this device's capacity (the suite's earlier tensors live on the device), pricing
    no line of Python unless `fields` set a price."""
    return dict(part_fit._raw("h100-sxm"), memory_capacity=float(_C._memory_limit()),
                **{"host_python_line": 0.0, **fields})


def host_seconds(program, profile) -> float:
    """The host's simulated time for one call of program(x), warmed up once, under phantom execution."""
    with simulate(profile, execute=False):
        x = torch.empty(4, device="simhpu")
        program(x)
        torch.simhpu.synchronize()
        before = _C._simclock_host_now()
        program(x)
        return _C._simclock_host_now() - before


def an_add(x):
    x.add_(1)


def a_loop_then_an_add(x):
    total = 0
    for i in range(50):
        total += i
    x.add_(total)


def lines_counted(call) -> int:
    before = _C._python_lines_counted()
    call()
    return _C._python_lines_counted() - before


def test_the_programs_python_between_operators_is_priced_a_line():
    per_line = 1e-6
    loop, plain = (host_seconds(p, part(host_python_line=per_line)) for p in (a_loop_then_an_add, an_add))
    # the loop's three lines more: `total = 0` once, the `for` 51 times, its body 50 times
    assert loop - plain == pytest.approx(102 * per_line, rel=1e-6)
    # a profile that prices no line counts none
    assert host_seconds(a_loop_then_an_add, part()) == pytest.approx(host_seconds(an_add, part()), rel=1e-9)


def test_the_same_program_is_priced_the_same_however_fast_this_machine_ran_it():
    import time
    pause = [0.0]

    def program(x):
        time.sleep(pause[0])  # (this machine's time: not the part's)
        x.add_(1)
    profile = part(host_python_line=1e-6)
    quick = host_seconds(program, profile)
    pause[0] = 0.05
    assert host_seconds(program, profile) == pytest.approx(quick, rel=1e-9)


def test_simhpus_own_python_and_what_it_calls_are_not_the_programs():
    with simulate(part(host_python_line=1e-6), execute=False):
        a = torch.empty(64, 64, device="simhpu")
        for call in (lambda: a @ a, lambda: a + a, torch.simhpu.synchronize):
            call()  # (warmed up)
        # a matmul's FLOP formula runs torch's pytree under simhpu's Python: none of it is the program's
        assert lines_counted(lambda: a @ a) == lines_counted(lambda: a + a)
        assert lines_counted(torch.simhpu.synchronize) == lines_counted(lambda: None) - 1  # (the lambda's line)
        # torch's own Python the program calls is the program's: nn.Module's call machinery
        linear = torch.nn.Linear(64, 64).to("simhpu")
        assert lines_counted(lambda: linear(a)) > lines_counted(lambda: a + a) + 5


def test_the_programs_simhpu_ships_are_counted_though_simhpu_calls_them():
    """profile_part's Python row is priced by part_fit's loop (simhpu's own code): its lines, the
    torch.nn modules' and the row's own, are still the program's."""
    case = dict(kind="launch", call=part_measure.PYTHON_HOST)
    plain = part_fit.priced_seconds(case, part())
    priced = part_fit.priced_seconds(case, part(host_python_line=1e-6))
    assert (priced - plain) / 1e-6 > 300


def test_a_thread_another_tracer_holds_is_left_to_it_with_a_warning():
    def other(frame, event, arg):
        return None
    sys.settrace(other)
    try:
        with pytest.warns(RuntimeWarning, match="another tracer"):
            with simulate(part(host_python_line=1e-6), execute=False):
                assert not _C._python_lines_counting()
        assert sys.gettrace() is other
    finally:
        sys.settrace(None)


def test_counting_stops_with_the_profile_and_with_measured_host_time():
    with simulate(part(host_python_line=1e-6), execute=False):
        assert _C._python_lines_counting()
        with simulate(part(host_python_line=1e-6), host_time="measured", execute=False):
            assert not _C._python_lines_counting()  # (measured: the program's own time is counted)
        assert _C._python_lines_counting()
    assert not _C._python_lines_counting() and sys.gettrace() is None


@pytest.mark.parametrize("value", [-1e-7, 1e-3, float("nan"), "fast"])
def test_a_line_price_out_of_range_is_refused_by_name(value):
    with pytest.raises(ProfileError, match="host_python_line"):
        load_profile(part(host_python_line=value))


def test_the_fit_reads_the_line_price_autograds_and_the_optimizers_off_their_rows_together():
    """The Python row's backward has autograd nodes, the autograd row's loop and torch.optim's step
    run Python lines: the three shares are solved together, each from its own row."""
    truth = dict(part_fit._raw("cpu-host"), memory_capacity=float(_C._memory_limit()),
                 host_python_line=0.8e-6, host_autograd_overhead=3e-6, host_optimizer_overhead=4e-6)
    cases = [c for c in part_measure.cpu_cases() if c["kind"] == "launch"]
    rows = [dict(case, seconds=part_fit.priced_seconds(case, truth), timing="host wall clock") for case in cases]
    base = dict(truth, host_python_line=0.1e-6, host_autograd_overhead=0.0, host_optimizer_overhead=0.0)
    fitted, _ = part_fit.fit(rows, base, rounds=1, log=lambda *_: None)
    for field in ("host_python_line", "host_autograd_overhead", "host_optimizer_overhead"):
        assert fitted[field] == pytest.approx(truth[field], rel=0.02), field


def test_a_row_timed_by_wall_clock_is_priced_until_its_call_returns():
    """A wall-clock row's clock ran until the call returned: the Python after its last kernel (torch.autograd.grad's
    own, after the engine ran the backward) is in its price, where a row timed on the device has the kernels alone."""
    case = dict(kind="memory-bound", call="torch.softmax(x, -1) forward + backward", dtype="float32", shape=[32, 128])
    profile = part(host_python_line=1e-5)
    on_the_wall = part_fit.priced_seconds(dict(case, timing="wall clock around 1 call(s) after synchronising"), profile)
    on_the_device = part_fit.priced_seconds(dict(case, timing="device (CUDA events around one call, median of 5)"), profile)
    assert on_the_wall >= on_the_device + 1e-5


def test_the_lines_before_a_backward_are_paid_before_autograds_thread_launches_it():
    """The backward runs on autograd's device thread, the program's thread waits: its lines since its last
    operator are paid when it hands over (entering the engine), not after the backward returned."""
    def first_backward_launch(python_lines_before_backward: int) -> float:
        with simulate(part(host_python_line=1e-6), execute=False) as sim:
            w = torch.ones(8, 8, device="simhpu", requires_grad=True)
            loss = (w * 2).sum()
            total = 0
            for i in range(python_lines_before_backward):
                total += i
            loss.backward()
            torch.simhpu.synchronize()
        backward = [x for x in sim.launches if x.work != "marker"][3:]  # (after the forward's ones, mul and sum)
        return backward[0].launched
    # the loop's two lines a turn, 50 turns more
    assert first_backward_launch(50) - first_backward_launch(0) == pytest.approx(100e-6, rel=1e-6)


def test_an_optimizers_step_is_priced_a_tensor_not_a_line():
    """torch.optim's Python is mostly a loop over the parameters, far cheaper a line than nn.Module's:
    the profile prices it a tensor (host_optimizer_overhead), so its lines are not counted too, where
    the program calls it and where the fit's optimizer row does."""
    params = [torch.empty(4, device="simhpu", requires_grad=True) for _ in range(24)]
    for p in params:
        p.grad = torch.empty_like(p)
    optimizer = torch.optim.AdamW(params, foreach=True)

    def program(x):
        x.add_(1)
        optimizer.step()
    def lines_priced(p):
        return host_seconds(p, part(host_python_line=1e-6)) - host_seconds(p, part())
    assert lines_priced(program) - lines_priced(an_add) == pytest.approx(1e-6, abs=1e-9)  # (its one line more)
    row = dict(kind="launch", call=part_measure.OPTIMIZER_HOST, tensors=24, seconds=1e-3, timing="wall clock")
    priced = [part_fit.evaluate([row], part(host_python_line=price))[0]["priced"] for price in (0.0, 1e-6)]
    assert priced[1] - priced[0] <= 2e-6
