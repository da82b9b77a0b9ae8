"""The control plane: list, inspect and stop executions from any process (contracts 4, 8, 9 and 11).

The job manager never takes a resource lock, so status and stop work while a job holds one. Before it
writes anything it reconciles the store with the execution's files, in this order of authority:

1. ``result.json`` — a state the worker published is adopted, a terminal one never overwritten;
2. the worker's identity — from the job row, or from the worker's own claim (in ``result.json``) when the
   row has none (its starter died, or the store was busy, between the spawn and the record): a live
   worker is never declared dead, and stop always reaches it;
3. a row whose worker never claimed it is given up only by winning the claim (``abandon``), so a late
   worker can never run what the record already calls ended. That happens at once when the process that
   started it is gone, otherwise only after it had a fair chance to start it.

A worker that is gone without a terminal state is recorded ``failed`` with its exit code and the tail of
its log. Finishers publish to ``result.json`` first (compare-and-set) and copy what it then holds into
the store, so two processes finishing the same job agree on one terminal state in both places.

Stop escalates, each step after a bounded grace period (settings): ``stop.requested`` (cooperative) →
SIGINT / CTRL_BREAK to the worker's process group → kill the process tree. ``stopped`` is recorded only
once the worker is gone or published it itself.

Several homes may share one database (PostgreSQL for several machines, or one SQLite file). A job's
worker, files and lock are in the home that started it, out of sight of any other (another host, or
another PID namespace): only its own installation reconciles, recovers, stops or prunes it. Any other
lists it read-only, with the host it runs on (``data["elsewhere"]``), and refuses to stop it, saying
where it runs.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from tether.config import Settings
from tether.errors import JobNotFound, StoreError
from tether.execution import process
from tether.execution.process import ProcessRef
from tether.execution.protocol import (
    ExecutionPaths,
    ProtocolError,
    abandon,
    last_progress,
    log_tail,
    publish,
    read_claim,
    read_exit,
    read_result,
    request_stop,
    stopped_status,
)
from tether.execution.remote import settle_if_lost, stop_elsewhere
from tether.execution.space import blocks_freed
from tether.execution.spawner import FORKSERVER_START_TIMEOUT_S, Spawner
from tether.execution.wake import Wake
from tether.store.jobs import JobRecord, JobStore
from tether.store.workers import WorkerStore
from tether.tasks.result import TaskResult, TaskStatus

log = logging.getLogger("tether.jobs")

# After a worker is seen dead, how long an async caller waits for its reaper to record the exit code.
EXIT_CODE_WAIT_S = 1.0
POLL_S = 0.01
T = TypeVar("T")
STEPS = ("cooperative", "interrupt", "kill")
# In a job's data: it runs inline, in the process its starter fields name (no worker, no files but a
# stop request).
INLINE = "inline"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pruned:
    """What retention removed (or, in a dry run, would remove)."""

    executions: tuple[str, ...]
    events: int
    bytes_freed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    reattached: tuple[str, ...]
    adopted: tuple[str, ...]
    failed: tuple[str, ...]


class JobManager:
    def __init__(
        self,
        home: Path,
        store: JobStore,
        settings: Settings,
        spawner: Spawner | None = None,
        *,
        peers: WorkerStore | None = None,
    ) -> None:
        self.home = home
        self.peers = peers  # the installation's other nodes (``store/workers.py``), when it has a store
        self.store = store
        self.settings = settings
        self.spawner = spawner
        self.installation = store.installation
        self._inline: dict[str, Any] = {}  # execution id → the context of an inline task running here

    def mine(self, record: JobRecord) -> bool:
        """Whether the job is this home's: its worker and files are here, not on another installation
        or on another node of this one."""
        return self.installation.owns_here(record.installation, record.host)

    def paths(self, execution_id: str) -> ExecutionPaths:
        return ExecutionPaths.of(self.home, execution_id)

    def record(self, execution_id: str) -> JobRecord:
        record = self.store.get(execution_id)
        if record is None:
            raise JobNotFound(f"no job with execution id {execution_id!r}", execution_id=execution_id)
        return record

    # -- reconciliation -------------------------------------------------------------------------

    def reconcile(self, execution_id: str) -> JobRecord:
        """Bring the job's record in line with its worker and its files; return the record. Never waits.

        Another installation's job is returned as it is on record: its worker is out of this home's
        sight, so that a process is not seen here says nothing about whether it runs."""
        record = self.record(execution_id)
        if record.terminal:
            return record
        if not self.mine(record):
            return settle_if_lost(self, record)
        if record.data.get(INLINE):
            return self._reconcile_inline(record)
        paths = self.paths(execution_id)
        published, problem = _read(paths)
        if published is not None and published.status is not record.status:
            record = self._adopt(record, published, paths)
            if record.terminal:
                return record
        found = self._identity(record, paths, give_up=self._starter_gone_or_late(record))
        if isinstance(found, JobRecord):
            return found
        if found is None or process.is_alive(found):
            return record
        return self._dead(record, paths, problem)

    # -- inline tasks: they run in the process that called them, not in a worker ---------------------

    def register_inline(self, execution_id: str, ctx: Any) -> None:
        """An inline task of this process is running: a stop asked here reaches its handler at once."""
        self._inline[execution_id] = ctx

    def unregister_inline(self, execution_id: str) -> None:
        self._inline.pop(execution_id, None)

    def _reconcile_inline(self, record: JobRecord) -> JobRecord:
        """An inline task runs as long as the process that runs it: when that process is gone, so is it."""
        if record.starter_pid is None or record.starter_create_time is None:
            return record
        if process.is_alive(ProcessRef(pid=record.starter_pid, create_time=record.starter_create_time)):
            return record
        # Its handler had begun (an inline record is claimed running before it starts): it may have acted.
        data: dict[str, Any] = (
            {"interrupted": True, "pid": record.starter_pid} if record.status is TaskStatus.RUNNING else {}
        )
        data[INLINE] = True  # it died with that process, not by itself
        return self.finish(
            record,
            self.paths(record.execution_id),
            TaskStatus.FAILED,
            f"interrupted: the process that ran it (pid {record.starter_pid}) exited",
            data,
        )

    async def _stop_inline(self, record: JobRecord, reason: str) -> TaskResult:
        """Ask the handler to stop (the file its context looks for, and at once when it runs here), and
        wait the two graces of a worker's stop: it ends stopped if it looked, or completes meanwhile.
        A handler that never looks cannot be stopped (a thread is not killed): the answer says so, and
        the record stays what it is until the task ends, within its timeout."""
        execution_id = record.execution_id
        await _io(request_stop, self.paths(execution_id), reason)
        ctx = self._inline.get(execution_id)
        if ctx is not None:
            ctx.request_stop(reason)
        graces = self.settings.stop_grace_cooperative_s + self.settings.stop_grace_interrupt_s
        deadline = time.monotonic() + graces
        while True:
            record = await _io(self.reconcile, execution_id)
            if record.terminal or time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_S)
        described = await _io(self.describe, record)
        if record.terminal:
            return described
        timeout = record.data.get("timeout_s")
        within = f"its timeout of {timeout:g} s" if isinstance(timeout, int | float) else "its time limit"
        message = (
            f"{record.task_id} cannot be stopped: it runs inside the process that called it "
            f"(pid {record.starter_pid}) and does not look for a stop; it ends within {within}"
        )
        return described.model_copy(update={"message": message}).with_data(stop_refused=True)

    def _starter_gone_or_late(self, record: JobRecord) -> str | None:
        """Why an unclaimed execution may be given up now, or None while its starter may still start it."""
        age = time.time() - _epoch(record.created_at)
        if record.starter_pid is not None and record.starter_create_time is not None:
            starter = ProcessRef(pid=record.starter_pid, create_time=record.starter_create_time)
            if not process.is_alive(starter):
                return "the process that started it exited before its worker began"
        # The starter lives (or is unknown): it owns the start and its own deadline; this bound only
        # catches a starter that hangs.
        if age > self.settings.handshake_timeout_s * 2 + FORKSERVER_START_TIMEOUT_S:
            return f"no worker began within {age:.0f}s"
        return None

    def _identity(
        self,
        record: JobRecord,
        paths: ExecutionPaths,
        *,
        give_up: str | None,
        status: TaskStatus = TaskStatus.FAILED,
    ) -> ProcessRef | JobRecord | None:
        """The worker's identity (its own claim, else the row); or the record finished, when the
        execution was given up; or None while it may still start.

        The claim wins over the row: a retried spawn can fork a second process that exits at once, and
        the row may name that one while the worker that claimed the execution runs."""
        known = (
            None
            if record.pid is None or record.create_time is None
            else ProcessRef(pid=record.pid, create_time=record.create_time)
        )
        try:
            claim = read_claim(paths)
        except ProtocolError as exc:
            # A torn result file tore the claim with it: the row still names the worker.
            if known is not None:
                return known
            return self.finish(record, paths, TaskStatus.FAILED, f"the worker's claim is unreadable: {exc}")
        if claim is None and known is not None:
            return known  # not claimed yet
        if claim is None and give_up is not None:
            claim = abandon(paths, give_up)
        if claim is None:
            return None
        if claim.abandoned is not None:
            message = (
                f"stopped before it started ({claim.abandoned})"
                if status is TaskStatus.STOPPED
                else f"interrupted: the worker never started ({claim.abandoned})"
            )
            return self.finish(record, paths, status, message, {"never_started": True})
        ref = ProcessRef(pid=claim.pid, create_time=claim.create_time)
        if record.pid != ref.pid:
            try:
                self.store.set_process(record.execution_id, ref.pid, ref.create_time)
            except StoreError as exc:
                log.warning("could not record the worker of %s yet: %s", record.execution_id, exc.message)
        return ref

    def _adopt(self, record: JobRecord, published: TaskResult, paths: ExecutionPaths) -> JobRecord:
        return self.store.transition(
            published, exit_code=read_exit(paths) if published.status.terminal else None
        )

    def _dead(self, record: JobRecord, paths: ExecutionPaths, problem: str | None) -> JobRecord:
        # The worker may have published just before dying: read again now that it cannot write.
        published, problem = _read(paths)
        if published is not None and published.status.terminal:
            return self._adopt(record, published, paths)
        code = read_exit(paths)
        tail = log_tail(paths, self.settings.log_tail_lines)
        how = f"with code {code}" if code is not None else "(exit code unknown: it was not our child)"
        message = f"worker exited {how} without publishing a result"
        if problem is not None:
            message += f" ({problem})"
        data: dict[str, Any] = {"exit_code": code, "log_tail": tail, "pid": record.pid}
        if record.status is TaskStatus.RUNNING:
            data["interrupted"] = True
        return self.finish(record, paths, TaskStatus.FAILED, message, data, exit_code=code)

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
        """Write a terminal state for a worker that can no longer write one: the file first (compare-
        and-set), then the store takes whatever the file holds, so both agree whoever finishes.

        The file is not fsynced: a finisher only ever says the worker did not complete (it failed,
        was stopped, or never began), and if a power loss takes that away, recovery reaches the same
        conclusion from the dead worker. Only a worker's own `completed` is fsynced."""
        return self.store.transition(
            self._publish_end(record, paths, status, message, data), exit_code=exit_code
        )

    def _publish_end(
        self,
        record: JobRecord,
        paths: ExecutionPaths,
        status: TaskStatus,
        message: str,
        data: dict[str, Any] | None,
    ) -> TaskResult:
        """The file half of ``finish``: what the file holds afterwards (this end, or one that won)."""
        result = TaskResult(
            task_id=record.task_id,
            execution_id=record.execution_id,
            status=status,
            message=message,
            duration_seconds=max(0.0, round(time.time() - _epoch(record.created_at), 6)),
            data=data or {},
        )
        if paths.dir.exists():
            result = publish(paths, result, durable=False)
        return result

    # -- queries --------------------------------------------------------------------------------

    def status(self, execution_id: str) -> TaskResult:
        """The job's current TaskResult; ``data`` adds pid, times and the latest progress."""
        return self.describe(self.reconcile(execution_id))

    def list(
        self,
        *,
        active: bool = False,
        limit: int = 100,
        origin: str | None = None,
        task_ids: list[str] | None = None,
        before: str | None = None,
    ) -> list[TaskResult]:
        records = self.store.list(active=active, limit=limit, origin=origin, task_ids=task_ids, before=before)
        return [self.describe(self._settled(r)) for r in records]

    def _settled(self, record: JobRecord) -> JobRecord:
        """Reconciled, unless its files are beyond reading: one broken job never breaks a listing."""
        if record.terminal:
            return record
        try:
            return self.reconcile(record.execution_id)
        except (ProtocolError, OSError, ValueError) as exc:
            log.warning("job %s could not be reconciled: %s", record.execution_id, exc)
            return record
        except StoreError as exc:  # a store that cannot be written (a full disk): as on record
            log.debug("job %s could not be reconciled: %s", record.execution_id, exc.message)
            return record

    def describe(self, record: JobRecord) -> TaskResult:
        extra: dict[str, Any] = {
            "pid": record.pid,
            "caller": record.caller,
            "origin": record.origin,
            "background": record.background,
            "detached": record.detached,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "ended_at": record.ended_at,
        }
        if record.confirmed_by:
            extra["confirmed_by"] = record.confirmed_by
        if record.exit_code is not None:
            extra["exit_code"] = record.exit_code
        if not self.mine(record):
            extra["elsewhere"] = {
                "installation": record.installation,
                "host": record.host,
                "message": elsewhere(record, peer=self.installation.owns(record.installation)),
            }
        elif not record.terminal:  # an ended job's progress is history: a listing never opens its files
            progress = last_progress(self.paths(record.execution_id))
            if progress is not None:
                extra["progress"] = {k: progress.get(k) for k in ("fraction", "message", "ts")}
        result = record.to_result()
        return result.model_copy(update={"data": {**extra, **result.data}})

    def prune(
        self, *, older_than_s: float | None, keep: int | None, dry_run: bool = False, limit: int = 100_000
    ) -> Pruned:
        """Remove this home's ended executions (their folders and records) that ended more than
        ``older_than_s`` ago or beyond its newest ``keep``; None means no limit of that kind. Live jobs,
        and another installation's, are never touched."""
        if older_than_s is None and keep is None:
            return Pruned(executions=(), events=0, bytes_freed=0)
        cutoff = "" if older_than_s is None else _iso(time.time() - older_than_s)  # "": none too old
        ids = self.store.ended_before(cutoff, keep=10**12 if keep is None else keep, limit=limit)
        folders = [self.paths(execution_id).dir for execution_id in ids]
        freed = blocks_freed(folders)  # measured before removing: a dry run reports the same
        if not dry_run:
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
            self.store.forget(ids)
        return Pruned(executions=tuple(ids), events=0, bytes_freed=freed)

    def recover(self) -> Recovery:
        """At start-up: re-attach to this home's live workers, adopt published results, mark dead ones
        failed (another installation's jobs are its own to recover)."""
        reattached: list[str] = []
        adopted: list[str] = []
        failed: list[str] = []
        for record in self.store.list(active=True, limit=10_000, here=True):
            published, _ = _read(self.paths(record.execution_id))
            after = self._settled(record)
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
            record = await _io(self.reconcile, execution_id)
            if record.terminal or (deadline is not None and time.monotonic() >= deadline):
                return await _io(self.describe, record)
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.2)

    async def await_exit_code(self, paths: ExecutionPaths, wake: Wake | None = None) -> None:
        """Give the reaper of a worker that just died a moment to record its exit code (never blocks;
        recording it rings the doorbell ``wake`` listens on)."""
        if self.spawner is None:
            return
        spawner = self.spawner

        def recorded() -> bool:
            spawner.reap()
            return read_exit(paths) is not None

        if wake is not None:
            await wake.until(recorded, EXIT_CODE_WAIT_S, every=POLL_S)
            return
        with Wake.on(paths) as own:
            await own.until(recorded, EXIT_CODE_WAIT_S, every=POLL_S)

    async def stop(self, execution_id: str, *, reason: str = "requested") -> TaskResult:
        """Stop a job with the three-step escalation. A job that already ended is left as it is.

        A job whose worker is not known yet is stopped whenever it appears: the stop request waits in
        ``stop.requested`` (a worker honours it before its handshake), and if no worker claims the
        execution within the handshake timeout, the stop gives it up so that none ever will.
        """
        record = await _io(self.reconcile, execution_id)
        if record.terminal:
            return (await _io(self.describe, record)).with_data(already_ended=True)
        if not self.mine(record) and self.peers is not None and self.installation.owns(record.installation):
            return await stop_elsewhere(self, record, reason)
        if not self.mine(record):  # its worker is not this home's to signal: nothing is done
            refused = await _io(self.describe, record)
            return refused.model_copy(update={"message": elsewhere(record)}).with_data(stop_refused=True)
        if record.data.get(INLINE):  # no worker to signal: never the process that runs it
            return await self._stop_inline(record, reason)
        paths = self.paths(execution_id)
        await _io(request_stop, paths, reason)
        status = stopped_status(reason)
        found = await self._worker_of(record, paths, reason, status)
        if isinstance(found, JobRecord):
            return (await _io(self.describe, found)).with_data(stop_step="before_start")
        ref = found

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
        with Wake.on(paths) as wake:  # woken when the worker publishes or exits, not by polling
            wake.watch_exit(ref)
            for name, action, seconds in zip(STEPS, actions, grace, strict=True):
                if action is not None:
                    await _quick(action, ref)
                if await wake.until(lambda: self._ended(paths, ref), seconds, every=POLL_S):
                    step = name
                    break
            published, _ = _read(paths)
            said_how = published is not None and published.status.terminal
            if process.is_alive(ref):
                # Still exiting after publishing how it ended: kill_tree was never needed.
                if not said_how:
                    current = await _io(self.record, execution_id)
                    return (await _io(self.describe, current)).with_data(stop_failed=True)
            else:
                # Anything the worker left running in its group goes with it.
                await _quick(process.kill_tree, ref)
            if published is not None and said_how:
                record = await _io(self._adopt, record, published, paths)
            else:
                why = f"{status.value}: {reason}" + ("" if step == "cooperative" else f" (after {step})")
                data = {"stop_reason": reason, "stop_step": step}
                # The end goes to the file while the reaper records the exit code, which the store
                # row then carries. ``record`` may be older than the store: only what never changes
                # (the task, its start) is read from it, and neither the file nor the store lets a
                # terminal state be overwritten.
                ending = asyncio.ensure_future(_io(self._publish_end, record, paths, status, why, data))
                await self.await_exit_code(paths, wake)
                ended = await ending
                record = await _io(self.store.transition, ended, exit_code=read_exit(paths))
        result = await _io(self.describe, record)
        return result if "stop_step" in result.data else result.with_data(stop_step=step)

    async def _worker_of(
        self, record: JobRecord, paths: ExecutionPaths, reason: str, status: TaskStatus
    ) -> ProcessRef | JobRecord:
        """The worker to stop, waiting for it to claim its execution; or the record, finished, when no
        worker began in time (or the execution ended meanwhile)."""
        deadline = time.monotonic() + self.settings.handshake_timeout_s
        while True:
            late = self._starter_gone_or_late(record)
            if late is None and time.monotonic() >= deadline:
                late = f"no worker began within {self.settings.handshake_timeout_s:g}s"
            give_up = late and f"{reason}: {late}"
            found = await _io(self._identity, record, paths, give_up=give_up, status=status)
            if found is not None:
                return found
            await asyncio.sleep(POLL_S)
            record = await _io(self.record, record.execution_id)
            if record.terminal:
                return record

    def _ended(self, paths: ExecutionPaths, ref: ProcessRef) -> bool:
        published, _ = _read(paths)
        return (published is not None and published.status.terminal) or not process.is_alive(ref)


def elsewhere(record: JobRecord, *, peer: bool = False) -> str:
    """Where another installation's job runs (or ran), and that it is acted on there; ``peer``: another
    node of this installation, which applies the stops asked from here."""
    if peer:
        ran = "ran" if record.terminal else "runs"
        return f"job {record.execution_id} {ran} on node {record.host or 'unknown'} of this installation"
    where = f"host {record.host or 'unknown'} (tether installation {record.installation or 'unknown'})"
    if record.terminal:
        return f"job {record.execution_id} ran on {where}, not in this home"
    return f"job {record.execution_id} runs on {where}, not in this home: stop it there"


async def _io(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Blocking work (a store transaction, a file fsync, a flock) off the event loop."""
    return await asyncio.to_thread(function, *args, **kwargs)


def _read(paths: ExecutionPaths) -> tuple[TaskResult | None, str | None]:
    """The published result, or (None, what is wrong with the file) when it cannot be read."""
    try:
        return read_result(paths), None
    except ProtocolError as exc:
        return None, f"result.json is unreadable: {exc}"


async def _quick(action: Callable[[ProcessRef], object], ref: ProcessRef) -> None:
    """A signal to a worker's group, on the loop where that takes microseconds (on Linux, reading the
    worker's tree follows /proc's children lists); in a thread where it walks every process."""
    if process.TREE_IS_CHEAP:
        action(ref)
    else:
        await asyncio.to_thread(action, ref)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()
