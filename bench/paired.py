"""Paired, interleaved measurement: ours and its floor alternate in one run, and the ratio reported is
the median of the per-pair ratios (a ratio of two separate blocks swings 2-3x with the machine's load).

Every figure is wall time and CPU time. CPU is counted by a ``Cpu`` meter chosen per row and named in
the row's output:

- ``Cpu.here()``: this process and the children it has reaped (``getrusage`` SELF + CHILDREN, exact to
  the microsecond). Right for work done in this process or in children that have exited.
- ``Cpu.tree(...)``: the same plus the live processes of a tree (a server, a fork server and its workers),
  read through psutil: each one's own CPU and that of the children it reaped. The kernel reports those in
  clock ticks (10 ms), so a single call's CPU is coarse: CPU is therefore a total over all rounds divided
  by the rounds (a truncation error of under a tick per sample, not one per call), and the CPU ratio is
  the ratio of the two totals.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import psutil

Metric = Literal["wall", "cpu"]


class Cpu:
    """CPU seconds used so far by this process (its threads and reaped children) and, optionally, by the
    live processes under ``roots`` and under this process, minus the subtrees rooted at ``exclude``."""

    def __init__(
        self,
        label: str,
        *,
        descendants: bool = False,
        roots: Callable[[], Iterable[int]] = tuple,
        exclude: Callable[[], Iterable[int]] = tuple,
        children_only: bool = False,
    ) -> None:
        self.label = label
        # only the reaped children of this process: rows that time commands in subprocesses, where this
        # process's own CPU (waiting, polling) is no part of either side
        self.children_only = children_only
        self.descendants = descendants
        self.roots = roots
        self.exclude = exclude

    @classmethod
    def here(cls) -> Cpu:
        return cls("this process + its reaped children (getrusage)")

    @classmethod
    def tree(
        cls,
        label: str,
        *,
        roots: Callable[[], Iterable[int]] = tuple,
        exclude: Callable[[], Iterable[int]] = tuple,
    ) -> Cpu:
        return cls(label, descendants=True, roots=roots, exclude=exclude)

    def sample(self, *, before: bool) -> float:
        """Seconds of CPU. Finding the other processes costs this process milliseconds (a walk over /proc,
        a query), so it is kept outside the window: before a call this process is read last, after a call
        first."""
        if not before:
            own = _own(self.children_only)
            return own + self._others()
        others = self._others()
        return others + _own(self.children_only)

    def _others(self) -> float:
        roots = tuple(self.roots())
        if not (self.descendants or roots):
            return 0.0
        excluded = set(self.exclude())
        tops: list[psutil.Process] = []
        if self.descendants:
            tops += [child for child in psutil.Process().children() if child.pid not in excluded]
        for pid in roots:
            try:
                tops.append(psutil.Process(pid))
            except psutil.Error:
                continue
        total = 0.0
        seen: set[int] = set()
        for top in tops:
            try:
                members = [top, *top.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in members:
                if proc.pid in seen or proc.pid in excluded or proc.pid == os.getpid():
                    continue
                seen.add(proc.pid)
                try:
                    times = proc.cpu_times()
                except psutil.Error:
                    continue  # gone between the walk and the read: its parent's reaped-children time has it
                total += times.user + times.system + times.children_user + times.children_system
        return total


def _own(children_only: bool = False) -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    if children_only:
        return children.ru_utime + children.ru_stime
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


@dataclass(frozen=True, slots=True, kw_only=True)
class Pair:
    ours_ms: float  # wall, median
    floor_ms: float
    ratio: float  # wall, median of the per-pair ratios
    ours_cpu_ms: float  # CPU per call, total over the rounds / rounds
    floor_cpu_ms: float
    cpu_ratio: float  # ratio of the CPU totals
    cpu_label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Goal:
    """``ours ≤ limit × floor`` on ``metric``. ``loaded_floor_ms``: above it (the floor's wall median or
    CPU per call) the machine is too loaded for the floor to stand for anything, and no verdict is given."""

    limit: float
    metric: Metric = "wall"
    loaded_floor_ms: float | None = None
    why: str | None = None  # why the goal is out of reach, printed when it is not met


def why_not(why: str | None) -> None:
    """The reason under a row that misses its goal, wrapped to the bench's width."""
    if not why:
        return
    import textwrap

    for line in textwrap.wrap(why, width=110, initial_indent="why not: ", subsequent_indent="  "):
        print(f"  {'':<44} {line}")


def paired(
    ours: Callable[[], object],
    floor: Callable[[], object],
    rounds: int,
    warmup: int = 2,
    *,
    cpu: Cpu | tuple[Cpu, Cpu] | None = None,
) -> Pair:
    """Run ``ours`` and ``floor`` alternately (which goes first alternates too). Each is timed, unless it
    returns a float: that is its own wall measurement in seconds (e.g. from a signal to an exit). ``cpu``
    is one meter for both or a meter each (e.g. each excluding the other's server)."""
    meters = (cpu, cpu) if isinstance(cpu, Cpu) else cpu or (Cpu.here(), Cpu.here())
    for _ in range(warmup):
        ours()
        floor()
    walls: dict[int, list[float]] = {0: [], 1: []}
    cpus = [0.0, 0.0]
    ratios: list[float] = []
    for i in range(rounds):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for side in order:
            fn, meter = (ours, floor)[side], meters[side]
            cpu_start = meter.sample(before=True)
            start = time.perf_counter()
            measured = fn()
            elapsed = time.perf_counter() - start
            cpus[side] += meter.sample(before=False) - cpu_start
            walls[side].append(measured if isinstance(measured, float) else elapsed)
        ratios.append(walls[0][-1] / walls[1][-1])
    return Pair(
        ours_ms=statistics.median(walls[0]) * 1000,
        floor_ms=statistics.median(walls[1]) * 1000,
        ratio=statistics.median(ratios),
        ours_cpu_ms=cpus[0] / rounds * 1000,
        floor_cpu_ms=cpus[1] / rounds * 1000,
        cpu_ratio=cpus[0] / cpus[1] if cpus[1] > 0 else float("inf"),
        cpu_label=_labels(meters),
    )


def _labels(meters: tuple[Cpu, Cpu]) -> str:
    ours, floor = (meter.label for meter in meters)
    return ours if ours == floor else f"{ours} / {floor}"


def verdict(goal: Goal | None, pair: Pair) -> str:
    if goal is None:
        return "no goal"
    floor_ms = max(pair.floor_ms, pair.floor_cpu_ms)
    if goal.loaded_floor_ms is not None and floor_ms > goal.loaded_floor_ms:
        loaded = f"no verdict: the machine is loaded (floor {floor_ms:.0f} ms)"
        return f"goal ≤ {goal.limit:g}x {goal.metric}: {loaded}"
    ratio = pair.ratio if goal.metric == "wall" else pair.cpu_ratio
    return f"goal ≤ {goal.limit:g}x {goal.metric}: {'met' if ratio <= goal.limit else 'not met'}"


def row(name: str, pair: Pair, floor_name: str, goal: Goal | float | None = None) -> None:
    """Two lines: the figures, wall and CPU side by side with the verdict; then what the row is paired
    with and whose CPU is counted."""
    if isinstance(goal, float | int):
        goal = Goal(limit=float(goal))
    print(
        f"  {name:<44} wall {pair.ours_ms:9.3f} / {pair.floor_ms:8.3f} ms = {pair.ratio:6.2f}x"
        f"   CPU {pair.ours_cpu_ms:9.3f} / {pair.floor_cpu_ms:8.3f} ms = {pair.cpu_ratio:6.2f}x"
        f"   {verdict(goal, pair)}"
    )
    print(f"  {'':<44} paired with: {floor_name}; CPU of {pair.cpu_label}")
    if isinstance(goal, Goal) and verdict(goal, pair).endswith("not met"):
        why_not(goal.why)
