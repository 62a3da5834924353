"""torch.simhpu.chaos: chaos scheduling, for finding missing synchronisation.

With SIMHPU_CHAOS=SEED set before the program starts, the device's stream
workers are held back at seeded random points: the first launch a worker finds
after it was idle, with probability 1/2, for up to 10 ms; any other launch, with
probability 1/16, for up to 1 ms. Independent streams drift apart, so work on one
stream that another reads without waiting for it is read too early in an
ordinary test, not only when the timing happens to go wrong. The delays follow
from the seed, per stream: each stream's n-th launch gets the same draw under the
same seed, so a program that launches the same way holds the same launches for
the same times again (draws() lists them). Whether a draw applies at the 1/2 or
the 1/16 rate depends on whether the worker had gone idle, which follows the
program's synchronisation but can also follow the host's timing; what a failing
seed reproduces exactly is the draws. Device errors, sanitizer reports and
torch.simhpu.trace files name the seed.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import NamedTuple

from torch_simhpu import _C


def seed() -> int | None:
    """The seed in use, or None while chaos scheduling is off."""
    return _C._chaos_seed()


class Draw(NamedTuple):
    """What a stream's worker drew for one launch."""
    device: int
    stream: int
    launch: int  # which of the stream's launches since the seed was set (from 0)
    after_idle: bool  # the worker found it after waiting for work: held with probability 1/2, not 1/16
    held: bool
    microseconds: int  # how long it was held (or would have been)


def draws() -> list[Draw]:
    """The draws since the seed was last set (the first 100,000), in the order they were made.

    Under the same seed, each stream's n-th launch draws the same number: where the
    worker found the launch the same way (`after_idle`), it is held, or not, for the
    same time."""
    return [Draw(*d) for d in _C._chaos_draws()]


@contextlib.contextmanager
def scheduling(seed: int | None):
    """Chaos scheduling with `seed` for the block (None: off), then as it was."""
    if seed is not None and not (isinstance(seed, int) and 0 <= seed < 2**64):
        raise ValueError(f"torch.simhpu.chaos.scheduling: the seed must be an int from 0 to 2**64-1, got {seed!r}")
    before = _C._chaos_seed()
    _C._set_chaos_seed(seed)
    try:
        yield
    finally:
        _C._set_chaos_seed(before)


def _announce_from_environment() -> None:
    """A run with chaos on says so, with its seed, before anything can fail."""
    value = os.environ.get("SIMHPU_CHAOS", "")
    if value and not (value.isascii() and value.isdigit() and int(value) < 2**64):
        raise ValueError(f"SIMHPU_CHAOS={value!r}: expected a seed, a whole number from 0 to 2**64-1 "
                         "(unset or empty: chaos scheduling off)")
    if _C._chaos_seed() is not None:
        print(f"torch_simhpu: chaos scheduling on, SIMHPU_CHAOS={_C._chaos_seed()}", file=sys.stderr)
