"""Makes PyTorch know the device as "simhpu", or "npu" (torch_simhpu._device_name), once, at import."""
import atexit
import os
import sys

import torch

from torch_simhpu import _C, chaos, device, sanitizer, simulation
from torch_simhpu._device_name import DEVICE_TYPE
from torch_simhpu.simulation import pricing


def _attach_the_lenses() -> None:
    """The lenses' faces on torch.simhpu (the device module names none of them): chaos scheduling,
    the stream sanitizer, simulated time and pricing."""
    device.chaos = chaos
    device.sanitizer = sanitizer
    device.simulation = simulation
    device.profiles, device.set_profile, device.simulate = simulation.profiles, simulation.set_profile, simulation.simulate
    device.price, device.price_collective = pricing.price, pricing.price_collective


def register(backward_may_have_run: bool) -> None:
    _attach_the_lenses()
    device.simulation._start_from_environment()  # first: the memory's capacity may follow the profile
    device.simulation.simulated_ranks._start_from_environment()
    torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    torch._register_device_module(DEVICE_TYPE, device)
    if DEVICE_TYPE != "simhpu":
        # The simulator's own API (simulate, price, sanitizer) keeps its documented name whatever
        # the device is called; torch.npu is the same module until torch_npu extends it.
        torch.simhpu = device
        sys.modules["torch.simhpu"] = device
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    if backward_may_have_run and not _loaded_by_torch_import():
        _check_autograd_engine()
    atexit.register(_drain_at_exit)
    device.memory._start_from_environment()
    device.sanitizer._start_from_environment()
    device.chaos._announce_from_environment()


def _drain_at_exit() -> None:
    """Kernels still queued at exit finish before the interpreter tears down.

    A kernel that failed with nobody left to observe it still fails the program:
    the error is printed and the exit status is 1 (an exception raised here would
    only be printed as "ignored", with status 0).
    """
    if _C._is_in_bad_fork():
        return  # a forked child: the device was never its own
    try:
        _C._synchronize_all()
    except Exception as error:  # noqa: BLE001 - any failure is the program's failure
        sys.stderr.write(f"simhpu: a kernel failed and no synchronising call reported it before exit:\n{error}\n")
        sys.stderr.flush()
        os._exit(1)
    _let_autograd_threads_finish()


def _let_autograd_threads_finish() -> None:
    """Waits until the autograd engine's simhpu threads have let go of the last backward.

    A backward returns as soon as its device thread marks it complete; the thread then
    drops its reference to the backward's state, which holds a Python object (the
    contextvars context torch stashes for it) and so needs the GIL. A program that exits
    right after a backward can finalise the interpreter first, and the thread, denied the
    GIL, is unwound through a destructor that may not throw: "terminate called without
    an active exception" and status -6. Each device thread finishes one backward before
    it takes the next, so an empty backward on every device index, run without the
    stash, returns only after each has let go.
    """
    run_backward = torch.autograd.Variable._execution_engine.run_backward
    for index in range(device.device_count()):
        leaf = torch.empty(0, device=f"{DEVICE_TYPE}:{index}", requires_grad=True)
        run_backward((leaf,), (torch.empty_like(leaf),), False, False, (), True, True)


def _loaded_by_torch_import() -> bool:
    """Whether `import torch` is loading this package (its torch.backends entry point), when no
    backward can have run yet. The check below starts autograd's device threads, which a process
    forked afterwards could not use for a backward ("Unable to handle autograd's threading in
    combination with fork-based multiprocessing"), while a CUDA process forks freely until its
    first backward: it runs only where a backward may have run before this import."""
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "_import_device_backends" and frame.f_globals.get("__name__") == "torch":
            return True
        frame = frame.f_back
    return False


def _check_autograd_engine() -> None:
    """Fails the import clearly when a backward ran before the device was registered.

    The autograd engine sizes its per-device threads at the first backward of the
    process; a device registered later has no thread there, and every backward on it
    would fail with an internal assertion. An empty backward on the device finds out
    (it launches nothing).
    """
    leaf = torch.empty(0, device=DEVICE_TYPE, requires_grad=True)
    try:
        # The engine itself: torch.autograd.backward's Python would import sympy (0.3 s) for an empty backward.
        torch.autograd.Variable._execution_engine.run_backward(
            (leaf,), (torch.empty(0, device=DEVICE_TYPE),), False, False, (), True, True)
    except RuntimeError as error:
        if "device_ready_queues_" not in str(error):
            raise
        raise ImportError(
            "torch_simhpu was imported after a backward pass had run in this process, so PyTorch's "
            "autograd engine has no thread for the simhpu device. torch_simhpu loads itself with "
            "`import torch` (its torch.backends entry point); if TORCH_DEVICE_BACKEND_AUTOLOAD=0 is set, "
            "import torch_simhpu before the first backward."
        ) from None
