"""torch.simhpu simulated time: how long the program would take on the part a
device profile describes.

    torch.simhpu.set_profile("h100-sxm")          # or SIMHPU_DEVICE_PROFILE=h100-sxm|path.json
    with torch.simhpu.simulate("h100-sxm") as sim:
        train_step()
    print(sim.report())

    python -m torch_simhpu.simulation --profile h100-sxm train.py [args]

Every launch is priced at launch time, in launch order (csrc/simclock): a
roofline for kernels (FLOPs from torch.utils.flop_counter's formulas for the
operators it knows, one per element otherwise; the bytes of the operands), the
host link for copies, an alpha-beta model of the fabric for collectives. Each
stream has a clock; waits on events and the host's synchronisations move the
clocks as they move the real part's. With a profile set, Event.elapsed_time
reports simulated milliseconds and torch.simhpu.trace() writes the simulated
timeline beside the host's.

Profiles are JSON files: the shipped ones are in torch_simhpu/simulation/profiles/ (see
profiles()); a path to the user's own is accepted wherever a name is.
"""
from __future__ import annotations

import contextlib
import os
import sys

from torch_simhpu import _C
from torch_simhpu.simulation import phantom
from torch_simhpu.simulation.part_profiles import (PROFILE_DIR, ProfileError, _profiles_in_use,  # noqa: F401
                                                   load_profile, profile, profiles, set_profile)
from torch_simhpu.simulation.report import PROJECTED_SCALES, Launch, Simulation  # noqa: F401
from torch_simhpu.simulation.command import main  # noqa: F401


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
    return any(a == "-m" and b == __name__ for a, b in zip(argv, argv[1:]))
