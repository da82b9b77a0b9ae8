"""Paired, interleaved measurement: ours and its floor alternate in one run, and the ratio reported is
the median of the per-pair ratios (a ratio of two separate blocks swings 2-3x with the machine's load)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pair:
    ours_ms: float
    floor_ms: float
    ratio: float


def paired(ours: Callable[[], object], floor: Callable[[], object], rounds: int, warmup: int = 2) -> Pair:
    """Run ``ours`` and ``floor`` alternately (which goes first alternates too). Each is timed, unless it
    returns a float: that is its own measurement in seconds (e.g. from a signal to an exit)."""
    for _ in range(warmup):
        ours()
        floor()
    mine: list[float] = []
    base: list[float] = []
    ratios: list[float] = []
    for i in range(rounds):
        order = (ours, floor) if i % 2 == 0 else (floor, ours)
        timings: dict[int, float] = {}
        for fn in order:
            start = time.perf_counter()
            measured = fn()
            elapsed = time.perf_counter() - start
            timings[id(fn)] = measured if isinstance(measured, float) else elapsed
        mine.append(timings[id(ours)])
        base.append(timings[id(floor)])
        ratios.append(timings[id(ours)] / timings[id(floor)])
    return Pair(statistics.median(mine) * 1000, statistics.median(base) * 1000, statistics.median(ratios))


def row(name: str, pair: Pair, floor_name: str, target: float | None = None) -> None:
    verdict = ""
    if target is not None:
        verdict = f"  (target ≤ {target:g}x: {'met' if pair.ratio <= target else 'MISSED'})"
    print(
        f"  {name:<40} {pair.ours_ms:9.2f} ms   {floor_name:<34} {pair.floor_ms:8.2f} ms"
        f"   ratio {pair.ratio:6.2f}x{verdict}"
    )
