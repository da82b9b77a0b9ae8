"""The executor this process is: what a workflow step runs with (runtime, executor, models, slot), set
by ``launch.launch`` before DBOS starts and cleared by ``shutdown``. A step that finds no host raises
``NotAnExecutor``: the workflow ran outside an executor, and is recovered by one, never given up.
Imports neither the engine nor a turn: both import it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tether.execution.executor import Executor
from tether.runtime import Runtime
from tether.supervisor import durable


@dataclass
class Host:
    """What this executor process runs attempts with."""

    runtime: Runtime
    executor: Executor
    model_for: Callable[[str | None], Any] | None = None
    slot: durable.Slot | None = None
    watch: asyncio.Task[None] | None = None  # the look for dead executors' slots
    notify: asyncio.Task[None] | None = None  # notifications and ended-work signals (``notify.loop``)
    quiet: list[Any] | None = (
        None  # what keeps idle queues' polls cheap (``idle.quiet_when_idle``), closed last
    )
    member: Any = None  # this executor in the installation's registry (``cluster.Member``)
    beat: asyncio.Task[None] | None = None  # its heartbeat (``Member.run``)


_HOST: Host | None = None


class NotAnExecutor(RuntimeError):
    """A workflow ran in a process that is not (or no longer) a launched tether executor: the work is
    recovered by an executor, never given up."""


def host() -> Host:
    if _HOST is None:
        raise NotAnExecutor("this process is not a tether executor (engine.launch was not called)")
    return _HOST


async def io(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kwargs)


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def current() -> Host | None:
    """This process's host, or None while it is not (or no longer) an executor."""
    return _HOST


def install(made: Host | None) -> None:
    """Become (``made``) or stop being (None) an executor."""
    global _HOST
    _HOST = made
