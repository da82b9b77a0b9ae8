"""Who runs a run: an executor process, found or become.

``drive`` follows a run to the point where it stops (over, or waiting for a person). If a live
executor holds a slot of the home (``tether worker``, ``tether serve``), the run was enqueued for it
and this process only follows the record (and, when the record stands still, checks that something
executes it: ``_Watch``); otherwise this process becomes the home's executor for the duration, and hands
on what it took for other runs when it leaves (``executing``). ``--detach`` with no executor
starts a background ``tether worker --until-idle`` that exits once nothing is left to run.

``serve`` is ``tether worker``: a long-lived executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tether.credentials import KEYS_FD_ENV, handing_pipe
from tether.runtime import Runtime
from tether.store.runs import RunRecord
from tether.supervisor import durable
from tether.tasks.spec import Registry

FOLLOW_POLL_S = 0.1
IDLE_GRACE_S = 2.0


def stopped(run: RunRecord) -> bool:
    """Over, or waiting for a person: nothing more happens until someone acts."""
    return run.status != "running"


async def follow(
    runtime: Runtime,
    run_id: str,
    on_change: Callable[[RunRecord], None] | None = None,
    *,
    until: Callable[[RunRecord], bool] = stopped,
) -> RunRecord:
    """Poll ``run_id``'s record until ``until`` holds; ``on_change`` sees every new state."""
    seen: tuple[Any, ...] | None = None
    while True:
        run = await asyncio.to_thread(runtime.runs.get, run_id)
        assert run is not None
        mark = (run.status, run.updated_at, tuple((t.status, t.attempts, t.updated_at) for t in run.tasks))
        if mark != seen:
            seen = mark
            if on_change is not None:
                on_change(run)
        if until(run):
            return run
        await asyncio.sleep(FOLLOW_POLL_S)


async def _segment_settled(runtime: Runtime, run: RunRecord, timeout_s: float = 5.0) -> None:
    """Let the run's workflow segment record its own end before this executor leaves (it has decided
    already; leaving earlier only makes the next executor replay it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = await asyncio.to_thread(durable.segment_status, runtime, run.run_id, run.segment)
        if status not in ("PENDING", "ENQUEUED"):
            return
        await asyncio.sleep(0.02)


def models_of(runtime: Runtime) -> Callable[[str | None], Any]:
    """The models an executor of ``runtime``'s home asks: its ``[model]``, or a named one."""
    from tether.models.factory import models_for

    return models_for(runtime)


async def execute_here(
    runtime: Runtime,
    registry: Registry,
    run_id: str,
    on_change: Callable[[RunRecord], None] | None = None,
    *,
    registry_ref: str | None = None,
) -> RunRecord:
    """Be the home's executor until ``run_id`` stops."""
    async with executing(runtime, registry, registry_ref):
        run = await follow(runtime, run_id, on_change)
        await _segment_settled(runtime, run)
        return run


@contextlib.asynccontextmanager
async def executing(
    runtime: Runtime, registry: Registry, registry_ref: str | None = None
) -> AsyncIterator[Any]:
    """This process is one of the home's executors for the duration (a command that found none). What
    it dequeued for others and has not finished is handed on when it leaves: a live executor of the
    home takes it over within seconds (each watches for dead slots); with none alive, a background
    ``tether worker --until-idle`` does, so nothing it took waits for the next command to start."""
    from tether.execution.executor import Executor
    from tether.supervisor import engine

    with Executor(registry, runtime=runtime) as executor:
        host = await engine.launch(runtime, executor, model_for=models_of(runtime))
        left: list[str] = []
        try:
            yield host
            with contextlib.suppress(Exception):  # a store hiccup: the next executor to launch recovers
                left = await engine.held_here()
        finally:
            # Interrupted (Ctrl-C), it leaves everything where it is, as it says, for `tether worker`.
            engine.shutdown()
        if left and not durable.live_executors(runtime.home):  # our own slot is let go by now
            spawn_worker(runtime.home, registry_ref)


async def drive(
    runtime: Runtime,
    registry: Registry,
    run_id: str,
    on_change: Callable[[RunRecord], None] | None = None,
    *,
    detach: bool = False,
    registry_ref: str | None = None,
    on_note: Callable[[str], None] | None = None,
) -> RunRecord:
    """Make sure something executes ``run_id``; follow it unless ``detach``. A run nobody executes is
    never waited on in silence: ``on_note`` hears what this command found and did about it."""
    live = durable.live_executors(runtime.home)
    if detach:
        if not live:
            spawn_worker(runtime.home, registry_ref)
        run = runtime.runs.get(run_id)
        assert run is not None
        return run
    note = on_note or (lambda text: None)
    while live:
        # Another process executes it; if that one leaves first (a `tether flow run` that became the
        # executor for its own run ends with it), this one takes over.
        watch = _Watch(runtime, note)
        run = await follow(runtime, run_id, on_change, until=watch.until)
        if stopped(run):
            return run
        live = [] if watch.take_over else durable.live_executors(runtime.home)
    return await execute_here(runtime, registry, run_id, on_change, registry_ref=registry_ref)


# A followed run that shows no change for this long is looked at: is anything executing it?
STALL_S = 10.0


class _Watch:
    """What a command that follows another executor's run looks for: every second, whether any executor
    is left; after ``STALL_S`` with no change, whether the run's segment is executed at all. A segment
    that ended while the run is on record as running (DBOS gave up on it, or it was cancelled outside
    tether) is enqueued again; one whose executor died and that no live executor took over within the
    watch's period is taken over by this command."""

    def __init__(self, runtime: Runtime, note: Callable[[str], None]) -> None:
        self.runtime = runtime
        self.note = note
        self.take_over = False
        self._checked = self._changed = time.monotonic()
        self._mark: tuple[Any, ...] | None = None

    def until(self, run: RunRecord) -> bool:
        if stopped(run):
            return True
        now = time.monotonic()
        mark = (run.updated_at, run.segment, tuple((t.status, t.attempts) for t in run.tasks))
        if mark != self._mark:
            self._mark, self._changed = mark, now
        if now - self._checked < 1.0:
            return False
        self._checked = now
        if not durable.live_executors(self.runtime.home):
            return True
        if now - self._changed < STALL_S:
            return False
        self._changed = now  # looked at: the next look is a period later
        return self._stalled(run)

    def _stalled(self, run: RunRecord) -> bool:
        try:
            status, holder = durable.segment_holder(self.runtime, run.run_id, run.segment)
        except Exception:  # a store hiccup: look again a period later
            return False
        if status in durable.NO_LIVE_SEGMENT:
            durable.continue_run(self.runtime, run.run_id, run.segment)
            ended = (status or "missing").lower().replace("_", " ")
            self.note(f"run {run.run_id}: nothing was executing it (its segment {run.segment} is {ended}): "
                      "enqueued it again for the live executors")  # fmt: skip
            return False
        if (
            status == "PENDING"
            and durable.holder_alive(self.runtime.home, holder, self.runtime.installation.host) is False
        ):
            self.note(f"run {run.run_id}: its executor ({holder}) died and no live executor took it over: "
                      "this command executes it")  # fmt: skip
            self.take_over = True
            return True
        return False


def spawn_worker(home: Path, registry_ref: str | None) -> int:
    """Start ``tether worker --until-idle`` in the background (its own session; output to the home's
    log); its pid."""
    command = [sys.executable, "-m", "tether.interfaces.cli", "--home", str(home)]
    if registry_ref:
        command += ["--registry", registry_ref]
    command += ["worker", "--until-idle"]
    logs = home / "logs"
    logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {**os.environ, "TETHER_CLI_SERVER": "0"}
    # The executor asks the model, so it gets this command's keys — through a pipe it reads once at
    # start, never in its environment (which every process it starts would otherwise carry).
    keys = handing_pipe()
    if keys is not None:
        env[KEYS_FD_ENV] = str(keys)
    try:
        with open(logs / "worker.log", "ab") as log:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=env,
                pass_fds=() if keys is None else (keys,),
            )
    finally:
        if keys is not None:
            os.close(keys)
    return child.pid


async def _pending_turns() -> list[Any]:
    from dbos import DBOS

    from tether.supervisor import durable

    return await DBOS.list_workflows_async(
        name=durable.TURN_WORKFLOW,
        status=["PENDING", "ENQUEUED"],
        limit=1,
        load_input=False,
        load_output=False,
    )


async def serve(
    runtime: Runtime,
    registry: Registry,
    *,
    until_idle: bool = False,
    on_start: Callable[[str], None] | None = None,
    resources: tuple[str, ...] = (),
) -> None:
    """Run as a long-lived executor (until cancelled, or, ``until_idle``, until no run is running and no
    handed-over turn is waiting or running)."""
    from tether.execution.executor import Executor
    from tether.supervisor import engine

    with Executor(registry, runtime=runtime) as executor:
        host = await engine.launch(runtime, executor, model_for=models_of(runtime), resources=resources)
        if on_start is not None:
            on_start(host.slot.executor_id if host.slot else "?")
        try:
            idle_since: float | None = None
            while True:
                await asyncio.sleep(0.2)
                if not until_idle:
                    continue
                busy = any(r.status == "running" for r in await asyncio.to_thread(runtime.runs.active))
                if not busy:  # a person's turn handed over by `tether run` keeps it too
                    busy = bool(await _pending_turns())
                if busy:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > IDLE_GRACE_S:
                    return
        finally:
            if host.member is not None:
                await host.member.depart()  # its running tool calls end on record first
            engine.shutdown()
