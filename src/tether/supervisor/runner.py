"""Who runs a run: an executor process, found or become.

``drive`` follows a run to the point where it stops (over, or waiting for a person). If a live
executor holds a slot of the home (``tether worker``, ``tether serve``), the run was enqueued for it
and this process only follows the record; otherwise this process becomes the home's executor for the
duration (and whatever it leaves unfinished, a later executor recovers). ``--detach`` with no executor
starts a background ``tether worker --until-idle`` that exits once nothing is left to run.

``serve`` is ``tether worker``: a long-lived executor.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
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

    def model_for(name: str | None) -> Any:
        from tether.models.factory import model_from_settings

        settings = runtime.model_settings
        if name:
            settings = settings.model_copy(update={"model": name})
        return model_from_settings(runtime.home, settings, resilience=runtime.resilience)

    return model_for


async def execute_here(
    runtime: Runtime,
    registry: Registry,
    run_id: str,
    on_change: Callable[[RunRecord], None] | None = None,
) -> RunRecord:
    """Be the home's executor until ``run_id`` stops."""
    from tether.execution.executor import Executor
    from tether.supervisor import engine

    with Executor(registry, runtime=runtime) as executor:
        await engine.launch(runtime, executor, model_for=models_of(runtime))
        try:
            run = await follow(runtime, run_id, on_change)
            await _segment_settled(runtime, run)
            return run
        finally:
            engine.shutdown()


async def drive(
    runtime: Runtime,
    registry: Registry,
    run_id: str,
    on_change: Callable[[RunRecord], None] | None = None,
    *,
    detach: bool = False,
    registry_ref: str | None = None,
) -> RunRecord:
    """Make sure something executes ``run_id``; follow it unless ``detach``."""
    live = durable.live_executors(runtime.home)
    if detach:
        if not live:
            spawn_worker(runtime.home, registry_ref)
        run = runtime.runs.get(run_id)
        assert run is not None
        return run
    while live:
        # Another process executes it; if that one leaves first (a `tether flow run` that became the
        # executor for its own run ends with it), this one takes over.
        run = await follow(runtime, run_id, on_change, until=_stopped_or_orphaned(runtime))
        if stopped(run):
            return run
        live = durable.live_executors(runtime.home)
    return await execute_here(runtime, registry, run_id, on_change)


def _stopped_or_orphaned(runtime: Runtime) -> Callable[[RunRecord], bool]:
    checked = [time.monotonic()]

    def until(run: RunRecord) -> bool:
        if stopped(run):
            return True
        if time.monotonic() - checked[0] < 1.0:
            return False
        checked[0] = time.monotonic()
        return not durable.live_executors(runtime.home)

    return until


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
) -> None:
    """Run as a long-lived executor (until cancelled, or, ``until_idle``, until no run is running and no
    handed-over turn is waiting or running)."""
    from tether.execution.executor import Executor
    from tether.supervisor import engine

    with Executor(registry, runtime=runtime) as executor:
        host = await engine.launch(runtime, executor, model_for=models_of(runtime))
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
            engine.shutdown()
