"""Simulated time on and off: set_profile (a profile on the clocks, or none), simulate (a block
whose launches are priced, its report the Simulation it yields), profile (the one in use) and the
environment's profile at import (SIMHPU_DEVICE_PROFILE)."""
from __future__ import annotations

import contextlib
import os
import sys
import threading

from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from torch_simhpu import _C
from torch_simhpu.simulation import phantom, python_lines
from torch_simhpu.simulation.flop_formulas import _install_flop_formulas
from torch_simhpu.simulation.part_profiles import _HOST_TIME, _profiles_in_use, load_profile
from torch_simhpu.simulation.report import Simulation

COMMAND = "torch_simhpu.simulation"  # what `python -m` runs


def set_profile(profile: str | os.PathLike | dict | None, *, host_time: str = "modelled") -> None:
    """Simulated time on with `profile` (its clocks start at zero), or off (None).

    host_time: "modelled" (the part's host: the profile's dispatch time per operator
    and launch time per kernel; the timeline is the same on every machine, and the
    same whether kernels run asynchronously, blocking or not at all) or "measured"
    (the program's own time between operators as this machine's CPU took it, added:
    it moves with this machine's speed and load).

    SIMHPU_DEVICE_PROFILE sets it at import, and there the device memory's capacity
    follows the profile unless SIMHPU_MEMORY_LIMIT says otherwise; set at run time,
    the capacity stays what the device started with.
    """
    if host_time not in _HOST_TIME:
        raise ValueError(f"torch.simhpu.set_profile: host_time must be 'measured' or 'modelled', got {host_time!r}")
    if profile is None:
        _C._simclock_set_profile(None)
        _count_lines_if_priced()
        return
    checked = load_profile(profile)
    _install_flop_formulas()
    _install_optimizer_host_time()
    _C._simclock_set_host_time(_HOST_TIME[host_time])
    _C._simclock_set_profile(checked)
    _profiles_in_use[checked["name"]] = checked
    _count_lines_if_priced()


def _count_lines_if_priced() -> None:
    """The program's Python lines counted while the profile in use prices them (modelled host time)."""
    name = _C._simclock_profile_name()
    if (name is not None and _profiles_in_use[name]["host_python_line"] > 0
            and _C._simclock_host_time() == _HOST_TIME["modelled"]):
        python_lines.start()
    else:
        python_lines.stop()


_optimizer_hooks = None
_optimizer_depth = threading.local()


def _install_optimizer_host_time() -> None:
    """An optimizer step's host time besides its operators (the profile's host_optimizer_overhead a
    parameter tensor with a gradient), charged once a step: an optimizer that steps others (torchtitan's
    container) is counted at the outermost step only."""
    global _optimizer_hooks
    if _optimizer_hooks is not None:
        return

    def before(optimizer, *_):
        depth = getattr(_optimizer_depth, "value", 0)
        _optimizer_depth.value = depth + 1
        name = _C._simclock_profile_name()
        overhead = _profiles_in_use.get(name, {}).get("host_optimizer_overhead", 0.0) if name else 0.0
        if depth == 0 and overhead > 0:
            tensors = sum(p.grad is not None for group in optimizer.param_groups for p in group["params"])
            _C._simclock_add_host_time(overhead * tensors)

    def after(optimizer, *_):
        _optimizer_depth.value = max(0, getattr(_optimizer_depth, "value", 1) - 1)

    _optimizer_hooks = (register_optimizer_step_pre_hook(before), register_optimizer_step_post_hook(after))


def profile() -> str | None:
    """The name of the profile in use, or None while simulated time is off."""
    return _C._simclock_profile_name()


@contextlib.contextmanager
def simulate(profile: str | os.PathLike | dict | None = None, *, host_time: str = "modelled",
             execute: bool = True, values: str = "placeholder", tokens_per_step: int | None = None,
             flops_per_token: float | None = None, _keep_capacity: bool = False):
    """Simulated time for the block; yields a Simulation whose report() describes it.

    profile: the profile to use (None: the one set already). Clocks restart at
    zero when a profile is given; the one in use before is restored after.
    execute=False: phantom execution (torch_simhpu/simulation/phantom.py): launches are
    priced and placed, no kernel runs, device memory has the profile's capacity
    and is never touched; host reads of values get placeholders (values=
    "placeholder", counted in the report) or raise (values="error"), except
    values the host knows (made from host data, and small kernels over them:
    see torch_simhpu/simulation/phantom.py), which are computed and read as ever.
    tokens_per_step: the tokens one optimizer step of this device trains on; the
    report then gives tokens/s per device and the model FLOP utilisation (MFU),
    counting flops_per_token model FLOPs a token (default: 6 x the optimizer's
    parameters, attention's own FLOPs left out).
    """
    for name, value in (("tokens_per_step", tokens_per_step), ("flops_per_token", flops_per_token)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"torch.simhpu.simulate: {name} must be a number > 0, got {value!r}")
    before = _C._simclock_profile_name()
    before_mode = _C._simclock_host_time()
    if profile is None and before is None:
        raise ValueError("torch.simhpu.simulate: no profile given and none set (pass one, e.g. 'h100-sxm')")
    phantom_here = not execute and not phantom.enabled()
    if phantom_here:  # (first: its synchronisation is not the block's time)
        phantom.start(load_profile(profile) if profile is not None else _profiles_in_use[before], values,
                      keep_capacity=_keep_capacity)  # (torch.simhpu.price: the program's device, as it is)
    try:
        if profile is not None:
            set_profile(profile, host_time=host_time)
    except Exception:
        if phantom_here:
            phantom.stop()
        raise
    name = _C._simclock_profile_name()
    run = Simulation(name)
    run.profile_data = _profiles_in_use[name]
    run.tokens_per_step = tokens_per_step
    run.flops_per_token = flops_per_token
    run._begin()
    try:
        yield run
    finally:
        run._end()
        if phantom_here:
            phantom.stop()
        if profile is not None:
            if before is None:
                _C._simclock_set_profile(None)
            else:
                _C._simclock_set_host_time(before_mode)
                _C._simclock_set_profile(_profiles_in_use[before])
            _count_lines_if_priced()


def _start_from_environment() -> None:
    """SIMHPU_DEVICE_PROFILE=NAME|PATH (SIMHPU_SIMULATED_HOST_TIME=measured|modelled)."""
    value = os.environ.get("SIMHPU_DEVICE_PROFILE", "").strip()
    if not value:
        if _run_as_the_command():
            phantom.execution_off_in_environment()  # (a bad value is refused now; main() applies a good one)
            return  # (the command's --profile prices the launches: main() starts phantom execution with it)
        phantom._start_from_environment(None)  # (SIMHPU_EXECUTE=0 alone is an error)
        return
    checked = load_profile(value)
    if not os.environ.get("SIMHPU_MEMORY_LIMIT"):
        os.environ["SIMHPU_MEMORY_LIMIT"] = str(int(checked["memory_capacity"]))  # read at the device's first use
    set_profile(checked, host_time=os.environ.get("SIMHPU_SIMULATED_HOST_TIME", "modelled").strip() or "modelled")
    phantom._start_from_environment(checked)


def _run_as_the_command() -> bool:
    """Whether this process is `python -m torch_simhpu.simulation ...`, which names its profile on its
    command line (its import of the package comes before main() reads it)."""
    argv = list(getattr(sys, "orig_argv", ()))
    return any(a == "-m" and b == COMMAND for a, b in zip(argv, argv[1:]))
