"""Which way the device ran each operator, and which operators may take the reference path.

Every aten operator runs on simhpu one of three ways:

- ``dedicated``: a kernel of the device's own (``op_plugin_functions.yaml``, the
  native tensor-creation, copy and view operators);
- ``reference``: ATen's CPU kernel, run as a device kernel on the stream's worker
  over the device memory, asynchronously;
- ``synchronized``: the same, but the host first waited for the device, because the
  output's shape depends on the data (``nonzero``, ``masked_select``, ``.item()``)
  or the operator has no meta kernel.

``op_routes()`` counts them for a block of code, so a port can list what a model
still lacks. ``set_fallback`` is PyTorch's PrivateUse1 fallback control: ``global``
(every operator may take the reference path; the default), ``selective`` (only the
listed ones) or ``blocklist`` (all but the listed ones). The environment variables
``SIMHPU_FALLBACK`` and ``SIMHPU_FALLBACK_OPS`` (comma-separated) set the same at start.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from torch_simhpu import _C

ROUTES = ("dedicated", "reference", "synchronized")


@dataclass
class OpRoutes:
    """Per-operator counts of the calls made in a ``with op_routes()`` block."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def ops(self, route: str) -> list[str]:
        """The operators that took `route` at least once, most calls first."""
        _check_route(route)
        hits = [(n[route], op) for op, n in self.counts.items() if n[route]]
        return [op for _, op in sorted(hits, key=lambda hit: (-hit[0], hit[1]))]

    def total(self, route: str) -> int:
        _check_route(route)
        return sum(n[route] for n in self.counts.values())

    def __str__(self) -> str:
        rows = [f"{'operator':<48} {'dedicated':>9} {'reference':>9} {'synchronized':>12}"]
        for op in sorted(self.counts):
            n = self.counts[op]
            rows.append(f"{op:<48} {n['dedicated']:>9} {n['reference']:>9} {n['synchronized']:>12}")
        return "\n".join(rows)


def _check_route(route: str) -> None:
    if route not in ROUTES:
        raise ValueError(f"op_routes: route must be one of {ROUTES}, got {route!r}")


def _difference(before: dict, after: dict) -> dict[str, dict[str, int]]:
    counts = {}
    for op, totals in after.items():
        earlier = before.get(op, (0, 0, 0))
        delta = [now - then for now, then in zip(totals, earlier)]
        if any(delta):
            counts[op] = dict(zip(ROUTES, delta))
    return counts


@contextlib.contextmanager
def op_routes() -> Iterator[OpRoutes]:
    """Counts, per operator, the calls of the block by route (all threads)::

        with torch.simhpu.op_routes() as routes:
            model(x).sum().backward()
        print(routes.ops("synchronized"))
    """
    result = OpRoutes()
    _C._start_counting_routes()
    before = _C._route_counts()
    try:
        yield result
    finally:
        _C._stop_counting_routes()
        result.counts = _difference(before, _C._route_counts())


def set_fallback(mode: str, ops: Iterable[str] = ()) -> None:
    """Which operators without a dedicated kernel may take the reference path.

    mode: "global" (all), "selective" (only `ops`) or "blocklist" (all but `ops`).
    ops: names such as "aten::exp", "exp" (every overload) or "aten::add.Tensor".
    An operator refused raises NotImplementedError naming it and how to allow it.
    """
    if isinstance(ops, str):
        raise TypeError("set_fallback: ops must be a list of operator names, not one string")
    _C._set_fallback(mode, list(ops))


def get_fallback() -> tuple[str, list[str]]:
    """The current fallback mode and its operator list."""
    mode, ops = _C._fallback()
    return mode, list(ops)


@contextlib.contextmanager
def fallback(mode: str, ops: Iterable[str] = ()) -> Iterator[None]:
    """set_fallback for the block, then the previous policy again."""
    previous = get_fallback()
    set_fallback(mode, ops)
    try:
        yield
    finally:
        set_fallback(*previous)
