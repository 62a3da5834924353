"""The lines of the program's own Python, counted for the modelled host to price (a profile's
host_python_line, seconds a line): what the part's host spends between operators in nn.Module's
machinery, a model's forward and an optimizer's bookkeeping. A count, not a clock: the same
program gets the same price on a busy machine and a quiet one, under phantom, blocking or
asynchronous execution.

Counting uses the interpreter's trace hook on the thread that set the profile (csrc/python/
python_lines.cpp). simhpu's own Python is not the program's, nor is what it calls; the programs
simhpu ships (the model zoo, profile_part's calls) are. Python the autograd engine runs (hooks, a
backward's final callbacks: FSDP2's) is not counted: whether it runs on the program's thread or on
autograd's device thread, which is not traced, depends on which finished the graph first, that is on
how the kernels ran. Nor is an optimizer's step (torch.optim's Python and the hooks it runs): the
profile prices it a tensor (host_optimizer_overhead), as its lines are mostly a loop over the
parameters, each far cheaper than a line of nn.Module's machinery; counted at a module line's price,
a foreach AdamW step's 1,344 lines over 24 tensors read 2.5x its measured time on a CPU. A thread a
debugger or coverage already traces is left to it, and its lines go unpriced (a warning says so).
"""
from __future__ import annotations

import os
import warnings

from torch_simhpu import _C

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The package's modules that are programs, as a user's would be: their lines are the program's.
_PROGRAMS = ("model_zoo.py", os.path.join("simulation", "part_measure.py"))


def _uncounted_entries() -> list:
    """The code through which Python enters what is priced otherwise: the autograd engine
    (torch.autograd.backward and grad) and an optimizer's step (every torch.optim optimizer's step
    is wrapped by one function, Optimizer.profile_hook_step's)."""
    from torch.autograd import graph
    from torch.optim import Optimizer
    entries = []
    engine = getattr(graph, "_engine_run_backward", None)  # (torch >= 2.3)
    if engine is not None:
        entries.append(engine.__code__)
    step_wrapper = getattr(Optimizer.profile_hook_step(lambda *args, **kwargs: None), "__code__", None)
    if step_wrapper is not None:
        entries.append(step_wrapper)
    return entries


def start() -> bool:
    """Counts this thread's program lines from now; False (with a warning) if another tracer holds it."""
    if _C._python_lines_start([_PACKAGE + os.sep], [os.path.join(_PACKAGE, p) for p in _PROGRAMS], _uncounted_entries()):
        return True
    warnings.warn("torch_simhpu: another tracer (a debugger, coverage) holds this thread: the program's Python "
                  "lines are not priced (the profile's host_python_line), so simulated host time reads short",
                  RuntimeWarning, stacklevel=3)
    return False


def stop() -> None:
    _C._python_lines_stop()

