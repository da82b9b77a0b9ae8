"""Workers' progress, relayed into the event log.

A worker reports progress by appending to its execution's ``events`` file (the file protocol: workers
never touch the database). ``ProgressRelay`` watches the files of the home's active jobs and appends a
``tool_progress`` event for each new report, under the topic the job's other events have (its thread,
its run, or ``job:<id>``), so every reader of the log — the web page above all — sees a progress bar
move within one poll of the worker's write.

One relay per home: it holds ``<home>/executors/progress.lock`` while it runs, so two servers never
relay the same report twice; a second relay waits for the lock and takes over when the first leaves.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from tether.events import ToolProgress
from tether.execution.lock import try_hold
from tether.execution.protocol import ExecutionPaths, last_progress

if TYPE_CHECKING:
    from tether.runtime import Runtime

log = logging.getLogger("tether.progress")
POLL_S = 0.05
JOBS_EVERY_S = 0.25  # how often the list of active jobs is read again
LOCK = "executors/progress.lock"


class ProgressRelay:
    def __init__(self, runtime: Runtime, *, poll_s: float = POLL_S) -> None:
        self.runtime = runtime
        self.poll_s = poll_s
        self._seen: dict[str, tuple[int, int]] = {}  # execution id -> (size, mtime_ns) of its events file
        self._jobs: list[tuple[str, str]] = []  # (execution id, topic) of the active jobs

    async def run(self) -> None:
        """Relay until cancelled (waiting for the home's relay lock first)."""
        path = self.runtime.home / LOCK
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle = None
        try:
            while handle is None:
                handle = try_hold(path)
                if handle is None:
                    await asyncio.sleep(1.0)
            loop = asyncio.get_running_loop()
            listed = 0.0
            failures = 0
            while True:
                try:
                    if loop.time() - listed >= JOBS_EVERY_S:
                        self._jobs = await asyncio.to_thread(self._active)
                        listed = loop.time()
                    if self._jobs:
                        await asyncio.to_thread(self.relay_once)
                    failures = 0
                except Exception:  # the store is away for a moment: keep relaying, never die silently
                    failures += 1
                    log.exception("relaying progress failed (%d in a row); retrying", failures)
                    await asyncio.sleep(min(5.0, self.poll_s * 2**failures))
                await asyncio.sleep(self.poll_s)
        finally:
            if handle is not None:
                handle.close()

    def _active(self) -> list[tuple[str, str]]:
        records = self.runtime.jobs.list(active=True, limit=500)
        live = {r.execution_id for r in records}
        for gone in set(self._seen) - live:
            del self._seen[gone]
        return [(r.execution_id, r.origin or f"job:{r.execution_id}") for r in records]

    def relay_once(self) -> int:
        """Append an event for every job whose progress changed since the last look; how many."""
        sent = 0
        for execution_id, topic in self._jobs:
            paths = ExecutionPaths.of(self.runtime.home, execution_id)
            try:
                stat = os.stat(paths.events)
            except OSError:
                continue
            mark = (stat.st_size, stat.st_mtime_ns)
            if self._seen.get(execution_id) == mark:
                continue
            first = execution_id not in self._seen
            self._seen[execution_id] = mark
            progress = last_progress(paths)
            if progress is None or (first and not _recent(progress)):
                continue
            self.runtime.events.append(_event(execution_id, topic, progress))
            sent += 1
        return sent


def _recent(progress: dict[str, Any]) -> bool:
    """Whether a report found on the relay's first look is news (not one relayed before a restart)."""
    import time

    ts = progress.get("ts")
    return isinstance(ts, int | float) and time.time() - ts < 5.0


def _event(execution_id: str, topic: str, progress: dict[str, Any]) -> ToolProgress:
    fraction = progress.get("fraction")
    if not isinstance(fraction, int | float) or not 0.0 <= fraction <= 1.0:
        fraction = None
    message = progress.get("message")
    return ToolProgress(
        topic=topic,
        execution_id=execution_id,
        fraction=None if fraction is None else float(fraction),
        message=str(message)[:500] if message is not None else "",
    )
