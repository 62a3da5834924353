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

from torch_simhpu.simulation.clocks import _start_from_environment, profile, set_profile, simulate  # noqa: F401
from torch_simhpu.simulation.command import main  # noqa: F401
from torch_simhpu.simulation.part_profiles import PROFILE_DIR, ProfileError, load_profile, profiles  # noqa: F401
from torch_simhpu.simulation.report import PROJECTED_SCALES, Launch, Simulation  # noqa: F401
