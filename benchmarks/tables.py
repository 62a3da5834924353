"""What every benchmark's table is made of: a row (PyTorch CPU against simhpu, with its target),
timing helpers that take the best of a few rounds, and the table's printer. Its own module so
that benchmarks/run.py and the benchmarks it gathers import it, and none imports run.py back."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

ROUNDS = 5


@dataclass
class Row:
    name: str
    unit: str
    reference: float  # PyTorch CPU; nan where PyTorch has no counterpart
    ours: float
    target: str = ""  # "ratio <= 1.0", "ratio >= 2.0", "value <= 5", "value >= 20"; "" for none

    @property
    def ratio(self) -> float:
        return self.ours / self.reference if self.reference == self.reference else math.nan

    @property
    def met(self) -> bool:
        if not self.target:
            return True
        what, op, bound = self.target.split()
        value = self.ratio if what == "ratio" else self.ours
        return value <= float(bound) if op == "<=" else value >= float(bound)

    def target_text(self) -> str:
        if not self.target:
            return "—"
        what, op, bound = self.target.split()
        suffix = "x" if what == "ratio" else f" {self.unit}"
        return f"{op} {float(bound):g}{suffix}"


def best_seconds(fn, calls: int) -> float:
    """Seconds per call: fn() makes `calls` calls; best of ROUNDS rounds after a warm-up."""
    fn()
    best = math.inf
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best / calls


def best_pair(reference, ours, calls: int) -> tuple[float, float]:
    """Both measured in alternating rounds, so machine load hits them alike."""
    reference(), ours()
    ref_best = ours_best = math.inf
    for _ in range(ROUNDS):
        start = time.perf_counter()
        reference()
        ref_best = min(ref_best, time.perf_counter() - start)
        start = time.perf_counter()
        ours()
        ours_best = min(ours_best, time.perf_counter() - start)
    return ref_best / calls, ours_best / calls


def repeat(fn, a, b, n):
    def loop():
        for _ in range(n):
            fn(a, b)
    return loop


def print_table(rows: list[Row]) -> None:
    header = f"| {'measure':50} | {'PyTorch CPU':>11} | {'simhpu':>9} | {'unit':8} | {'ratio':>6} | {'target':>12} | met |"
    print(header)
    print("|" + "|".join("-" * (len(part)) for part in header.split("|")[1:-1]) + "|")
    for row in rows:
        ref = "—" if row.reference != row.reference else f"{row.reference:.3g}"
        ratio = "—" if row.ratio != row.ratio else f"{row.ratio:.2f}"
        print(f"| {row.name:50} | {ref:>11} | {row.ours:9.3g} | {row.unit:8} | {ratio:>6} | "
              f"{row.target_text():>12} | {('yes' if row.met else 'NO') if row.target else '—':3} |")
