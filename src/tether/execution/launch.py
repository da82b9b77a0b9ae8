"""Process runs: an admitted call put on record, written as a signed request, spawned and followed.

The order is the crash-safety argument (docs/architecture.md, "One execution", steps 2-4): the job row
is inserted first (pending), so no worker may exist that no record points to; a twin call with the same
execution id finds that row and follows the run instead of starting a second one. A call cancelled
before its worker is asked for (while its row goes in, or its request is written) is given up and ended
``stopped`` from a thread, once its row is on record: its caller may never have learned its id. Then
``request.json``
is written, signed with the home's key, and the doorbell is listened on *before* the worker exists, so no
ring is missed. The spawn runs in a thread; a cancellation that arrives meanwhile asks the worker to
stop before its handshake (its handler never runs), lets the start finish and stops it. A spawn that
failed abandons the execution, unless the worker claimed it after all. Then ``Follow`` takes over; a
caller that gives up stops the run, unless it is a background task that already shook hands.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tether.credentials as credentials
import tether.telemetry as telemetry
from tether.config import Settings, setting_variables
from tether.errors import ConfigError, JobError, StoreError, TetherError
from tether.execution import faults, process
from tether.execution.admission import Admitted, Where, nothing_started, record_refusal
from tether.execution.environment import worker_env
from tether.execution.follow import Follow
from tether.execution.jobs import JobManager
from tether.execution.protocol import (
    KEYS_DIR,
    REQUEST_KEY,
    ExecutionPaths,
    ProtocolError,
    Request,
    abandon,
    read_result,
    request_key,
    request_stop,
    sign,
    write_request,
)
from tether.execution.protocol import (
    Confirmation as RequestConfirmation,
)
from tether.execution.records import RecordWriter, off_loop
from tether.execution.spawner import Spawner
from tether.execution.wake import Wake
from tether.store.jobs import ConfirmationUsed, JobRecord, JobStore
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import Registry, TaskSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One process run of an admitted call."""

    home: Path
    registry: Registry
    settings: Settings
    store: JobStore
    jobs: JobManager
    records: RecordWriter
    spawner: Callable[[], Spawner]  # started on first use
    key: Callable[[], bytes]  # the home's request key
    me: process.ProcessRef  # the starter: a non-detached worker stops when it dies
    import_path: str | None
    admitted: Admitted
    execution_id: str
    caller: str
    where: Where
    detach: bool
    tied: bool  # detached, on a resource this executor holds for the installation: dies with it all the same
    on_start: Callable[[str], None] | None
    attach: Callable[[JobRecord], Awaitable[TaskResult]]  # follows a twin call's run instead

    @property
    def spec(self) -> TaskSpec:
        return self.admitted.spec

    async def run(self) -> TaskResult:
        paths = ExecutionPaths.of(self.home, self.execution_id)
        if self.registry.ref is None:
            raise ConfigError(
                "this registry has no ref: workers re-import the registry, so create it as "
                "Registry(ref='your.module:registry') in an importable module"
            )
        reserving = _pool().submit(self._reserve)
        try:
            reserved = await asyncio.wrap_future(reserving)
        except asyncio.CancelledError:
            # The pending row may still land, and its caller never learns its id: end it once it is
            # on record, from a thread (the caller's event loop may be closing).
            reserving.add_done_callback(lambda done: _pool().submit(self._end_unstarted, paths, done))
            raise
        if isinstance(reserved, TaskResult):
            if reserved.data.get("run_ended"):  # its run was cancelled meanwhile: a refusal, on record
                return await record_refusal(
                    self.store, reserved, caller=self.caller, params=self.admitted.clean, detach=self.detach,
                    where=self.where,
                )  # fmt: skip
            return reserved
        if reserved is not None:  # a twin call with this id got there first: follow that one
            return await self.attach(reserved)
        # On record now: from here a caller that gives up can name it (and stop it), even while its
        # worker is still being started.
        if self.on_start is not None:
            self.on_start(self.execution_id)
        request = self._request(self.registry.ref)
        try:
            await off_loop(self._write, paths, request)
        except asyncio.CancelledError:
            # No worker was asked for: end it now, rather than have a stop wait out the handshake.
            _pool().submit(self._end_unstarted, paths, None)
            raise
        with Wake.on(paths) as wake:  # listening before the worker exists: no ring is missed
            return await self._start_and_follow(paths, wake)

    def _end_unstarted(self, paths: ExecutionPaths, reserving: Future[Any] | None) -> None:
        """A call cancelled before its worker was asked for: once its pending row is on record (if
        ``reserving`` put one there), give the execution up so that no worker ever runs it, and end it
        ``stopped``. Runs in a thread of its own: the caller's cancellation cannot cut it short."""
        if reserving is not None and (reserving.cancelled() or reserving.exception() is not None):
            return
        if reserving is not None and reserving.result() is not None:
            return  # nothing of ours was put on record
        try:
            claim = abandon(paths, "cancelled before it started")
            if claim.abandoned is None:
                return  # a worker claimed it after all: a stop reaches it as usual
            record = self.jobs.record(self.execution_id)
            if not record.terminal:
                data = {"stop_reason": "cancelled", "stop_step": "before_start"}
                self.jobs.finish(
                    record, paths, TaskStatus.STOPPED, "stopped before it started (cancelled)", data
                )
        except (OSError, TetherError):
            pass  # its starter's end settles it, as for any job whose starter left

    def _write(self, paths: ExecutionPaths, request: Request) -> None:
        write_request(paths, sign(request, self.key()))

    def _reserve(self) -> TaskResult | JobRecord | None:
        """The pending row, first: None once it is ours, the twin's record when another call inserted
        this id first, or a result when nothing may start (a used confirmation, a store that refused)."""
        spec, consent = self.spec, self.admitted.consent
        faults.point("executor.before_record")  # a test holds a call here, before anything is on record
        pending = TaskResult(
            task_id=spec.task_id,
            execution_id=self.execution_id,
            status=TaskStatus.PENDING,
            message="starting",
        )
        try:
            inserted = self.store.insert(
                pending,
                caller=self.caller,
                params=self.admitted.clean,
                resources=spec.resources,
                background=spec.background,
                detached=self.detach,
                starter=(self.me.pid, self.me.create_time),
                confirmation=None if consent is None else consent.nonce,
                confirmed_by=None if consent is None else consent.source,
                if_absent=self.where.given,
                **self.where.record,
            )
        except ConfirmationUsed as used:
            return TaskResult(
                task_id=spec.task_id,
                execution_id=self.execution_id,
                status=TaskStatus.REJECTED,
                message=f"this confirmation was already used by execution {used.execution_id}; "
                "the person must confirm again",
                data={"needs_confirmation": True, "confirmation_used_by": used.execution_id},
            )
        except StoreError as exc:  # nothing was started: say why, as a result (a refusal if its run ended)
            return nothing_started(spec.task_id, self.execution_id, exc)
        if inserted:
            return None
        known = self.store.get(self.execution_id)
        assert known is not None
        return known

    def _request(self, registry_ref: str) -> Request:
        consent, settings = self.admitted.consent, self.settings
        return Request(
            execution_id=self.execution_id,
            task_id=self.spec.task_id,
            registry_ref=registry_ref,
            caller=self.caller,
            grants=None if self.admitted.grants is None else self.admitted.grants.to_json(),
            origin=self.where.origin,
            params=self.admitted.clean,
            confirmation=None
            if consent is None
            else RequestConfirmation(digest=consent.digest, source=consent.source, nonce=consent.nonce),
            env=worker_env((*self.registry.env, *self.spec.env, *settings.worker_env, *setting_variables())),
            import_path=self.import_path,
            home=str(self.home),
            background=self.spec.background,
            detach=self.detach,
            tied=self.tied,
            parent_pid=self.me.pid,
            parent_create_time=self.me.create_time,
            parent_poll_s=settings.parent_poll_s,
            stop_grace_s=settings.stop_grace_cooperative_s,
            created_at=time.time(),
            trace=telemetry.traceparent(),
        )

    async def _start_and_follow(self, paths: ExecutionPaths, wake: Wake) -> TaskResult:
        started = await self._spawn(paths)
        if isinstance(started, TaskResult):
            return started
        ref = started
        faults.point("executor.after_spawn")
        # Off the critical path, in order: the worker's own claim names it until the row does.
        self.records.later(
            self.execution_id, self.store.set_process, self.execution_id, ref.pid, ref.create_time, defer=True
        )
        follow = Follow(
            settings=self.settings,
            jobs=self.jobs,
            store=self.store,
            records=self.records,
            spec=self.spec,
            paths=paths,
            ref=ref,
            wake=wake,
        )
        try:
            result = await follow.run()
            self.spawner().reap()  # a fresh interpreter per task leaves a child to reap
            return result
        except asyncio.CancelledError:
            # The caller gave up (Ctrl-C, a cancelled turn): the execution must not outlive it silently.
            if not (self.spec.background and _handshaken(paths)):
                await asyncio.shield(self.jobs.stop(self.execution_id, reason="cancelled"))
            raise

    async def _spawn(self, paths: ExecutionPaths) -> process.ProcessRef | TaskResult:
        """Start the worker: its identity, or the failed run when none could be started."""
        faults.point("executor.before_spawn")
        keys = credentials.handed_for(self.spec.secrets) if self.spec.secrets else None
        spawning = asyncio.ensure_future(asyncio.to_thread(self.spawner().spawn, paths, keys))
        try:
            return await asyncio.shield(spawning)
        except asyncio.CancelledError:
            # Cancelled while the worker was being started: ask it to stop at once (it honours that
            # before its handshake, so its handler never runs), let the start finish, then stop it.
            with contextlib.suppress(OSError):
                request_stop(paths, "cancelled")
            try:
                await spawning
            except (JobError, OSError):
                pass
            await asyncio.shield(self.jobs.stop(self.execution_id, reason="cancelled"))
            raise
        except (JobError, OSError) as exc:
            claim = await off_loop(abandon, paths, f"could not start a worker: {exc}")
            if claim.abandoned is None:  # it started after all
                return process.ProcessRef(pid=claim.pid, create_time=claim.create_time)
            why = f"could not start a worker: {exc}"
            record = await off_loop(self.jobs.record, self.execution_id)
            finished = await off_loop(self.jobs.finish, record, paths, TaskStatus.FAILED, why)
            return finished.to_result()


_POOL: tuple[int, ThreadPoolExecutor] | None = None
POOL_THREADS = 16


def _pool() -> ThreadPoolExecutor:
    """The threads that put calls on record (and end those cancelled meanwhile): not the event loop's,
    whose work a closing loop abandons. One pool per process: a forked child makes its own."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="tether-reserve"))
    return _POOL[1]


class RequestKey:
    """The home's request key, read again only when its file changed (it is replaced if damaged)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._key: bytes | None = None
        self._seen: tuple[int, int, int] | None = None

    def __call__(self) -> bytes:
        path = self.home / KEYS_DIR / REQUEST_KEY
        try:
            stat = os.stat(path)
            seen: tuple[int, int, int] | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            seen = None
        if seen is None or seen != self._seen or self._key is None:
            key = request_key(self.home)
            assert key is not None  # created on first use
            self._key = key
            stat = os.stat(path)
            self._seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        return self._key


def _handshaken(paths: ExecutionPaths) -> bool:
    try:
        result = read_result(paths)
    except ProtocolError:
        return False
    return result is not None and result.status is not TaskStatus.PENDING
