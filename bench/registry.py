"""Tasks for the benchmarks; workers import this module by ref, so run from the repository root."""

from __future__ import annotations

import signal
import time

from tether.tasks.context import TaskContext
from tether.tasks.spec import AGENT, CLI, Isolation, Registry, TaskSpec

H = "bench.registry:"
ME = frozenset({CLI})


def noop(ctx: TaskContext) -> str:
    return "ok"


def cooperative(ctx: TaskContext) -> None:
    while ctx.sleep(0.01):
        pass
    ctx.check_stop()


def deaf(ctx: TaskContext) -> None:
    ctx.progress(None, "deaf to stop.requested")
    while True:
        time.sleep(0.005)


def hung(ctx: TaskContext) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctx.progress(None, "deaf to everything")
    while True:
        time.sleep(0.005)


registry = Registry(ref="bench.registry:registry")
registry.add(
    TaskSpec(
        task_id="b.inline",
        handler=H + "noop",
        exposed_to=ME | {AGENT},
        resources=(),
        isolation=Isolation.INLINE,
    )
)
registry.add(
    TaskSpec(
        task_id="b.inline_safe",
        handler=H + "noop",
        exposed_to=ME,
        resources=(),
        isolation=Isolation.INLINE,
        idempotent=True,
    )
)
registry.add(TaskSpec(task_id="b.sync", handler=H + "noop", exposed_to=ME, resources=()))
registry.add(TaskSpec(task_id="b.background", handler=H + "cooperative", exposed_to=ME, background=True))
registry.add(TaskSpec(task_id="b.deaf", handler=H + "deaf", exposed_to=ME, background=True))
registry.add(TaskSpec(task_id="b.hung", handler=H + "hung", exposed_to=ME, background=True))


def ticker(ctx: TaskContext) -> None:
    """Reports progress every 50 ms with the moment of the report as its message (for latency)."""
    step = 0
    while ctx.sleep(0.05):
        step += 1
        ctx.progress((step % 100) / 100, repr(time.time()))
    ctx.check_stop()


registry.add(TaskSpec(task_id="b.ticker", handler=H + "ticker", exposed_to=ME, background=True, resources=()))
