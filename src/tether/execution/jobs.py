"""The control plane: list, inspect and stop executions from any process (contracts 4, 8 and 9).

The job manager never takes a resource lock, so status and stop work while a job holds one. Before it
writes anything it reconciles the store with the execution's ``result.json``: a terminal state the
worker published is adopted, never overwritten. A worker that is gone without a terminal state is
recorded ``failed`` with its exit code and the tail of its log.

Stop escalates, each step after a bounded grace period (settings): ``stop.requested`` (cooperative) →
SIGINT / CTRL_BREAK to the worker's process group → kill the process tree.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.config import Settings
from tether.errors import JobNotFound
from tether.execution import process
from tether.execution.process import ProcessRef
from tether.execution.protocol import (
    ExecutionPaths,
    ProtocolError,
    last_progress,
    log_tail,
    publish,
    read_exit,
    read_result,
    request_stop,
    stopped_status,
)
from tether.execution.spawner import Spawner
from tether.store.repo import JobRecord, JobRepo
from tether.tasks.result import TaskResult, TaskStatus

# After a worker is seen dead, how long to wait for its reaper to record the exit code.
EXIT_CODE_WAIT_S = 1.0
POLL_S = 0.01
STEPS = ("cooperative", "interrupt", "kill")


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    reattached: tuple[str, ...]
    adopted: tuple[str, ...]
    failed: tuple[str, ...]


class JobManager:
    def __init__(
        self, home: Path, store: JobRepo, settings: Settings, spawner: Spawner | None = None
    ) -> None:
        self.home = home
        self.store = store
        self.settings = settings
        self.spawner = spawner

    def paths(self, execution_id: str) -> ExecutionPaths:
        return ExecutionPaths.of(self.home, execution_id)

    def record(self, execution_id: str) -> JobRecord:
        record = self.store.get(execution_id)
        if record is None:
            raise JobNotFound(f"no job with execution id {execution_id!r}", execution_id=execution_id)
        return record

    # -- reconciliation -------------------------------------------------------------------------

    def reconcile(self, execution_id: str) -> JobRecord:
        """Bring the job's record in line with its worker and result file; return the record."""
        record = self.record(execution_id)
        if record.terminal:
            return record
        paths = self.paths(execution_id)
        published = self._read(paths)
        if published is not None and published.status is not record.status:
            record = self.store.transition(published, exit_code=read_exit(paths))
            if record.terminal:
                return record
        ref = _ref(record)
        if ref is None:
            # Never started (the starter died between the insert and the spawn) or not started yet.
            age = time.time() - _epoch(record.created_at)
            if age > self.settings.handshake_timeout_s * 2:
                return self.finish(record, paths, TaskStatus.FAILED, "interrupted: the worker never started")
            return record
        if process.is_alive(ref):
            return record
        return self._dead(record, paths)

    def _dead(self, record: JobRecord, paths: ExecutionPaths) -> JobRecord:
        # The worker may have published just before dying: read again now that it cannot write.
        published = self._read(paths)
        if published is not None and published.status.terminal:
            return self.store.transition(published, exit_code=read_exit(paths))
        code = self._exit_code(paths)
        tail = log_tail(paths, self.settings.log_tail_lines)
        how = f"with code {code}" if code is not None else "(exit code unknown: it was not our child)"
        message = f"worker exited {how} without publishing a result"
        data: dict[str, Any] = {"exit_code": code, "log_tail": tail, "pid": record.pid}
        if record.status is TaskStatus.RUNNING:
            data["interrupted"] = True
        return self.finish(record, paths, TaskStatus.FAILED, message, data, exit_code=code)

    def _exit_code(self, paths: ExecutionPaths) -> int | None:
        deadline = time.monotonic() + EXIT_CODE_WAIT_S
        while True:
            if self.spawner is not None:
                self.spawner.reap()
            code = read_exit(paths)
            if code is not None or time.monotonic() > deadline or self.spawner is None:
                return code
            time.sleep(POLL_S)

    def finish(
        self,
        record: JobRecord,
        paths: ExecutionPaths,
        status: TaskStatus,
        message: str,
        data: dict[str, Any] | None = None,
        *,
        exit_code: int | None = None,
    ) -> JobRecord:
        """Write a terminal state for a worker that can no longer write one, file first, then store."""
        result = TaskResult(
            task_id=record.task_id,
            execution_id=record.execution_id,
            status=status,
            message=message,
            duration_seconds=max(0.0, round(time.time() - _epoch(record.created_at), 6)),
            data=data or {},
        )
        if paths.dir.exists() and not publish(paths, result):
            adopted = self._read(paths)
            if adopted is not None:
                result = adopted
        return self.store.transition(result, exit_code=exit_code)

    @staticmethod
    def _read(paths: ExecutionPaths) -> TaskResult | None:
        try:
            return read_result(paths)
        except (ProtocolError, ValueError):
            return None

    # -- queries --------------------------------------------------------------------------------

    def status(self, execution_id: str) -> TaskResult:
        """The job's current TaskResult; ``data`` adds pid, times and the latest progress."""
        return self.describe(self.reconcile(execution_id))

    def list(self, *, active: bool = False, limit: int = 100) -> list[TaskResult]:
        records = self.store.list(active=active, limit=limit)
        return [self.describe(self.reconcile(r.execution_id) if not r.terminal else r) for r in records]

    def describe(self, record: JobRecord) -> TaskResult:
        extra: dict[str, Any] = {
            "pid": record.pid,
            "caller": record.caller,
            "background": record.background,
            "detached": record.detached,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "ended_at": record.ended_at,
        }
        if record.exit_code is not None:
            extra["exit_code"] = record.exit_code
        progress = last_progress(self.paths(record.execution_id))
        if progress is not None:
            extra["progress"] = {k: progress.get(k) for k in ("fraction", "message", "ts")}
        result = record.to_result()
        return result.model_copy(update={"data": {**extra, **result.data}})

    def blocking(self, resources: tuple[str, ...]) -> JobRecord | None:
        """An active job that claims one of ``resources``, after reconciling it."""
        if not resources:
            return None
        for record in self.store.list(active=True, limit=1000):
            if set(record.resources) & set(resources):
                record = self.reconcile(record.execution_id)
                if not record.terminal:
                    return record
        return None

    def recover(self) -> Recovery:
        """At start-up: re-attach to live workers, adopt published results, mark dead ones failed."""
        reattached: list[str] = []
        adopted: list[str] = []
        failed: list[str] = []
        for record in self.store.list(active=True, limit=10_000):
            published = self._read(self.paths(record.execution_id))
            after = self.reconcile(record.execution_id)
            if not after.terminal:
                reattached.append(after.execution_id)
            elif published is not None and published.status.terminal:
                adopted.append(after.execution_id)
            else:
                failed.append(after.execution_id)
        return Recovery(reattached=tuple(reattached), adopted=tuple(adopted), failed=tuple(failed))

    # -- waiting and stopping -------------------------------------------------------------------

    async def wait(self, execution_id: str, within_s: float | None = None) -> TaskResult:
        """Wait until the job reaches a terminal state (or ``within_s`` passed); returns its status then."""
        deadline = None if within_s is None else time.monotonic() + within_s
        delay = POLL_S
        while True:
            record = self.reconcile(execution_id)
            if record.terminal or (deadline is not None and time.monotonic() >= deadline):
                return self.describe(record)
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.2)

    async def stop(self, execution_id: str, *, reason: str = "requested") -> TaskResult:
        """Stop a job with the three-step escalation. A job that already ended is left as it is."""
        record = self.reconcile(execution_id)
        if record.terminal:
            return self.describe(record).with_data(already_ended=True)
        paths = self.paths(execution_id)
        request_stop(paths, reason)
        ref = _ref(record)
        if ref is None:
            # Nothing runs yet; the spawner may still start it, and the worker will see stop.requested.
            record = self.finish(
                record, paths, stopped_status(reason), f"stopped before it started ({reason})"
            )
            return self.describe(record)

        grace = (
            self.settings.stop_grace_cooperative_s,
            self.settings.stop_grace_interrupt_s,
            self.settings.stop_grace_kill_s,
        )
        actions: tuple[Callable[[ProcessRef], object] | None, ...] = (
            None,
            process.interrupt,
            process.kill_tree,
        )
        step = STEPS[-1]
        for name, action, seconds in zip(STEPS, actions, grace, strict=True):
            if action is not None:
                await asyncio.to_thread(action, ref)
            if await _until(lambda: self._ended(paths, ref), seconds):
                step = name
                break
        if process.is_alive(ref):
            # The worker published a terminal state and is still exiting; kill_tree was never needed.
            published = self._read(paths)
            if published is None or not published.status.terminal:
                return self.describe(self.record(execution_id)).with_data(stop_failed=True)
        else:
            # Anything the worker left running in its group goes with it.
            await asyncio.to_thread(process.kill_tree, ref)
        published = self._read(paths)
        if published is not None and published.status.terminal:
            record = self.store.transition(published, exit_code=read_exit(paths))
        else:
            status = stopped_status(reason)
            record = self.finish(
                record,
                paths,
                status,
                f"{status.value}: {reason}" + ("" if step == "cooperative" else f" (after {step})"),
                {"stop_reason": reason, "stop_step": step},
                exit_code=self._exit_code(paths),
            )
        result = self.describe(record)
        return result if "stop_step" in result.data else result.with_data(stop_step=step)

    def _ended(self, paths: ExecutionPaths, ref: ProcessRef) -> bool:
        published = self._read(paths)
        return (published is not None and published.status.terminal) or not process.is_alive(ref)


async def _until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)


def _ref(record: JobRecord) -> ProcessRef | None:
    if record.pid is None or record.create_time is None:
        return None
    return ProcessRef(pid=record.pid, create_time=record.create_time)


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()
