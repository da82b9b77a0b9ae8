"""The executor: the trust boundary every execution passes through, from every interface (contract 2).

``execute(task_id, params, caller=...)`` runs these steps in order and answers every refusal with a
structured ``TaskResult``, never an exception:

1. a new ``execution_id``;
2. look up the spec; 3. exposure check (unknown and unexposed are both ``not_found``);
4. validate params (size and depth limits, strict pydantic types, domain catalogs; wrong values come
   back with the allowed ones);
5. one active job per resource (the live holder of the lock is named);
6. environment pre-check (``requires``);
7. danger policy, last, so the person is only ever asked about a call that would otherwise run:
   ``destructive`` needs a ``Confirmation`` of exactly this call (task + digest of its canonical
   arguments), minted from the person's own act; ``caution`` needs one too unless the caller is a person
   acting directly (``[execution].direct_callers``). Each confirmation is used once;
8. write the signed ``request.json``, record the job, start the worker; 9. wait for the result (sync) or
   the ``running`` handshake (background). ``inline`` tasks run in this process after the same checks.

``control(execution_id, action, caller=...)`` is the one door to existing jobs (status, stop, wait):
a job whose task is not exposed to the caller, or that another origin started when the caller asked for
its own origin only, is ``not_found``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import inspect
import logging
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from tether.config import Settings
from tether.errors import (
    ConfigError,
    JobError,
    StopRequested,
    StoreError,
    TaskFailed,
    ToolNotFound,
    ToolRejected,
)
from tether.execution import faults, lock, process
from tether.execution.environment import worker_env
from tether.execution.jobs import INLINE, POLL_S, JobManager, Pruned
from tether.execution.protocol import (
    KEYS_DIR,
    REQUEST_KEY,
    TIMEOUT,
    Claim,
    ExecutionPaths,
    ProtocolError,
    Request,
    abandon,
    bounded,
    clip,
    read_claim,
    read_result,
    request_key,
    request_stop,
    sign,
    write_request,
)
from tether.execution.protocol import (
    Confirmation as RequestConfirmation,
)
from tether.execution.spawner import Spawner, default_spawner
from tether.execution.wake import Wake
from tether.execution.worker import WorkerContext, outcome
from tether.runtime import Runtime
from tether.store.jobs import ConfirmationUsed, JobRecord
from tether.tasks.confirm import Confirmation, call_digest
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import NAME_RE, Danger, Isolation, Registry, TaskSpec, load_object
from tether.tasks.validation import MAX_PARAMS_BYTES, validate_params

log = logging.getLogger("tether.executor")

MAX_POLL_S = 0.02
LIVENESS_POLL_S = 0.02  # with a doorbell, how often deadlines (and a silent worker) are checked
MAINTAIN_EVERY_S = 3600.0  # how often opening a home also applies the retention settings
T = TypeVar("T")
ORIGIN_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:/-]{0,199}$")
MAX_REFUSAL_CHARS = 2_000
Action = Literal["status", "stop", "wait"]
ACTIONS: tuple[Action, ...] = ("status", "stop", "wait")


# Execution ids name a folder in the home: letters, digits, '_', '.', '-' (never "..").
EXECUTION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def new_execution_id() -> str:
    """Sortable by start time (millisecond hex prefix), unique by 32 random bits."""
    return f"{time.time_ns() // 1_000_000:011x}{secrets.token_hex(4)}"


def execution_id_for(*parts: str) -> str:
    """A deterministic execution id for a step (thread, turn, index; later run, task, attempt): the same
    parts always name the same execution, so running the step again never starts a second worker."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return digest[:19]


class Executor:
    """Runs tasks of one registry in one tether home. Use as a context manager, or call ``close()``."""

    def __init__(
        self,
        registry: Registry,
        *,
        runtime: Runtime | None = None,
        home: str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
        spawner: Spawner | None = None,
    ) -> None:
        """Run ``registry``'s tasks with ``runtime`` (else one opened on ``home``, closed with this).

        ``settings`` replaces the runtime's ``[execution]`` settings for this executor."""
        self._owns_runtime = runtime is None
        self.runtime = runtime if runtime is not None else Runtime.open(home, settings=settings)
        self.registry = registry
        self.home = self.runtime.home
        self.settings = settings if settings is not None else self.runtime.settings
        self.store = self.runtime.jobs
        self._spawner = spawner
        self.jobs = JobManager(self.home, self.store, self.settings, spawner)
        self._me = process.current()
        self._import_path = import_root(registry.ref) if registry.ref else None
        # One thread writes the records that follow a spawn, so they land in the order they happened.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-records")
        self._settled: set[str] = set()
        self._key: bytes | None = None
        self._key_seen: tuple[int, int, int] | None = None

    @property
    def spawner(self) -> Spawner:
        if self._spawner is None:
            if self.registry.ref is None:
                raise ConfigError("a registry without a ref cannot start workers")
            env = worker_env((*self.registry.env, *self.settings.worker_env))
            self._spawner = default_spawner(
                self.registry.ref, self.home, forkserver=self.settings.forkserver, env=env
            )
            self.jobs.spawner = self._spawner
        return self._spawner

    def maintain(self, *, every_s: float = MAINTAIN_EVERY_S) -> None:
        """What a command does when it opens a home: re-attach to live workers, settle dead ones, and
        (at most every ``every_s``) apply the retention settings of ``[store]``."""
        self.jobs.recover()
        marker = self.home / "logs" / ".pruned"
        try:
            if time.time() - marker.stat().st_mtime < every_s:
                return
        except FileNotFoundError:
            pass
        self.prune()
        marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        marker.touch(mode=0o600)

    def prune(
        self,
        *,
        older_than_days: float | None = None,
        keep: int | None = None,
        dry_run: bool = False,
    ) -> Pruned:
        """Retention: ended executions older than ``older_than_days`` or beyond the newest ``keep`` go
        (folders and records), and so do old events. Defaults come from ``[store]``; 0 means no limit."""
        store = self.runtime.store_settings
        days = store.keep_days if older_than_days is None else older_than_days
        count = store.keep_executions if keep is None else keep
        pruned = self.jobs.prune(
            older_than_s=days * 86_400 if days else None, keep=count or None, dry_run=dry_run
        )
        events = 0
        if not dry_run and store.keep_events:
            before = time.time() - days * 86_400 if days else float("inf")
            events = self.runtime.events.prune(before_ts=before, keep=store.keep_events)
        return dataclasses.replace(pruned, events=events)

    def warm_up(self) -> None:
        """Start the worker spawner now rather than on the first task."""
        start = getattr(self.spawner, "start", None)
        if start is not None:
            start()

    def close(self) -> None:
        self._writer.shutdown(wait=True)  # queued records land before the store closes
        if self._spawner is not None:
            self._spawner.close()
        if self._owns_runtime:
            self.runtime.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute_sync(self, task_id: str, params: dict[str, Any] | None = None, **kwargs: Any) -> TaskResult:
        return asyncio.run(self.execute(task_id, params, **kwargs))

    # -- consent --------------------------------------------------------------------------------

    def confirm(
        self, task_id: str, params: Mapping[str, Any] | None, *, caller: str, source: str
    ) -> Confirmation:
        """A confirmation of exactly this call, for an interface acting on the person's own act (a
        typed command with ``--confirm``). ``ToolNotFound``/``ToolRejected`` for a call that cannot run."""
        spec = self.registry.get(task_id, caller)
        if spec is None:
            raise ToolNotFound(f"no task {task_id!r} is available to {caller}", task_id=task_id)
        validated = validate_params(spec, params)
        clean = {} if validated is None else validated.model_dump(mode="json")
        return Confirmation(task_id=task_id, digest=call_digest(task_id, clean), source=source)

    def _consent(
        self, spec: TaskSpec, clean: dict[str, Any], caller: str, confirmation: Confirmation | None
    ) -> Confirmation | dict[str, Any] | None:
        """The confirmation this call runs under (None for a safe task), or the refusal's data."""
        danger = spec.danger_for(clean)
        if danger is Danger.SAFE:
            return None
        digest = call_digest(spec.task_id, clean)
        if confirmation is not None and confirmation.matches(spec.task_id, digest):
            return confirmation
        if confirmation is None and danger is Danger.CAUTION and caller in self.settings.direct_callers:
            # A person typing the command is consenting to exactly that command.
            return Confirmation(task_id=spec.task_id, digest=digest, source=f"direct:{caller}")
        data: dict[str, Any] = {
            "needs_confirmation": True,
            "danger": danger.value,
            "params": clean,
            "digest": digest,
        }
        if confirmation is not None:
            data["confirmation_mismatch"] = True
        return data

    # -- execute --------------------------------------------------------------------------------

    async def execute(
        self,
        task_id: str,
        params: Mapping[str, Any] | None = None,
        *,
        caller: str,
        confirmation: Confirmation | None = None,
        detach: bool = False,
        origin: str | None = None,
        step_id: str | None = None,
        execution_id: str | None = None,
        on_start: Callable[[str], None] | None = None,
    ) -> TaskResult:
        """Run one task for ``caller``. ``confirmation`` only ever from the person, never from a model.

        ``origin`` says what started it (``thread:<id>``, later ``run:<id>``) and ``step_id`` which of
        its steps; callers that scope control to their origin see only those jobs. ``execution_id``
        makes the call idempotent: the same id never starts a second worker — a second call re-attaches
        to the live one or returns the recorded result (``execution_id_for`` derives one from a step).
        ``on_start(execution_id)`` is called once a worker process exists (to follow its progress).

        Nothing here blocks the event loop: store writes, file writes and checks run in threads.
        """
        started = time.monotonic()
        given = execution_id is not None
        if not isinstance(caller, str) or not NAME_RE.match(caller):
            raise ConfigError(f"caller must be a name such as 'agent', 'cli' or 'mcp', got {caller!r}")
        if origin is not None and not (isinstance(origin, str) and ORIGIN_RE.match(origin)):
            raise ConfigError("origin must be a short name such as 'thread:th-1234' (at most 200 characters)")
        if execution_id is None:
            execution_id = new_execution_id()
        elif (
            not (isinstance(execution_id, str) and EXECUTION_ID_RE.match(execution_id))
            or ".." in execution_id
        ):
            raise ConfigError(
                f"execution_id must be letters, digits, '_', '.' or '-' (at most 128), got {execution_id!r}"
            )
        elif not self._inline(task_id, caller):  # an inline call claims its id as it starts, below
            known = await _io(self.store.get, execution_id)
            if known is not None:
                return await self._attach(known, task_id, on_start)
        where = _Where(origin=origin, step_id=step_id, given=given)

        async def refuse(status: TaskStatus, message: str, data: dict[str, Any] | None = None) -> TaskResult:
            result = bounded(
                TaskResult(
                    task_id=task_id,
                    execution_id=execution_id,
                    status=status,
                    message=clip(message, MAX_REFUSAL_CHARS),
                    duration_seconds=round(time.monotonic() - started, 6),
                    data=data or {},
                )
            )
            return await self._record_refusal(result, caller, params, detach, where)

        spec = self.registry.get(task_id, caller) if isinstance(task_id, str) else None
        if spec is None:
            task_id = clip(str(task_id), 200)
            similar = self.registry.similar(task_id, caller)
            hint = f"; did you mean {', '.join(similar)}?" if similar else ""
            return await refuse(
                TaskStatus.NOT_FOUND,
                f"no task {task_id!r} is available to {caller}{hint}",
                {"similar": similar},
            )
        try:
            validated = validate_params(spec, params)
        except ToolRejected as exc:
            return await refuse(TaskStatus.REJECTED, exc.message, exc.data)
        clean = {} if validated is None else validated.model_dump(mode="json")
        held = await _io(lock.holder, self.home, spec.resources) if spec.resources else None
        if held is not None:
            resource, owner = held
            holder = str(owner.get("execution_id", "unknown"))
            if caller in self.settings.operator_callers or await _io(self._visible, holder, caller, None):
                who = f"execution {holder} ({owner.get('task_id', '?')})"
                data = {"blocked_by": holder, "blocking_task": owner.get("task_id"), "resource": resource}
            else:  # a job this caller may not see is not named to it
                who, data = "a job you cannot see", {"resource": resource}
            return await refuse(
                TaskStatus.REJECTED,
                f"resource {resource} is in use by {who}; stop it or wait for it to end",
                data,
            )
        try:
            unmet = await _io(self.registry.unmet, spec, self.home) if spec.requires else None
        except Exception as exc:
            return await refuse(TaskStatus.FAILED, f"precondition check failed: {type(exc).__name__}: {exc}")
        if unmet:
            return await refuse(TaskStatus.REJECTED, unmet, {"unmet": list(spec.requires)})
        if spec.available is not None:
            missing = await _io(spec.unavailable, self.home)
            if missing:
                return await refuse(TaskStatus.REJECTED, missing, {"unavailable": True})
        consent = self._consent(spec, clean, caller, confirmation)
        if isinstance(consent, dict):
            mismatch = (
                " (the confirmation given was for another call)"
                if consent.get("confirmation_mismatch")
                else ""
            )
            return await refuse(
                TaskStatus.REJECTED,
                f"{task_id} is {consent['danger']}: it runs only after the person confirms this exact call"
                + mismatch,
                consent,
            )
        if spec.isolation is Isolation.INLINE:
            return await self._run_inline(spec, execution_id, caller, where, validated, clean, started)
        return await self._run_worker(
            spec, execution_id, caller, where, clean, consent, detach, started, on_start
        )

    def _inline(self, task_id: object, caller: str) -> bool:
        spec = self.registry.get(task_id, caller) if isinstance(task_id, str) else None
        return spec is not None and spec.isolation is Isolation.INLINE

    async def _record_refusal(
        self, result: TaskResult, caller: str, params: object, detach: bool, where: _Where
    ) -> TaskResult:
        """Put a refusal on record; a twin call's record wins, and a store that cannot take it does not
        turn the refusal into an exception (the result says so)."""
        try:
            inserted = await _io(
                self.store.insert,
                result,
                caller=caller,
                params=_on_record(params),
                detached=detach,
                if_absent=where.given,
                **where.record,
            )
        except StoreError as exc:
            log.warning("could not record %s: %s", result.execution_id, exc.message)
            return result.with_data(not_on_record=exc.message)
        if not inserted:
            known = await _io(self.store.get, result.execution_id)
            assert known is not None
            return known.to_result()
        return result

    async def _attach(
        self, record: JobRecord, task_id: str, on_start: Callable[[str], None] | None
    ) -> TaskResult:
        """A second call with a known execution id: the recorded result, or the live job followed."""
        if record.task_id != task_id:
            raise ConfigError(
                f"execution id {record.execution_id!r} already belongs to {record.task_id!r}, not {task_id!r}"
            )
        eid = record.execution_id
        record = await _io(self.jobs.reconcile, eid)
        if not record.terminal and on_start is not None:
            on_start(eid)
        # Another process may still be starting it, or it runs: follow it to its outcome or handshake.
        while not (record.terminal or (record.background and record.status is TaskStatus.RUNNING)):
            await asyncio.sleep(POLL_S)
            record = await _io(self.jobs.reconcile, eid)
        described = await _io(self.jobs.describe, record)
        return described.with_data(attached=True)

    # -- inline ---------------------------------------------------------------------------------

    async def _run_inline(
        self,
        spec: TaskSpec,
        execution_id: str,
        caller: str,
        where: _Where,
        params: Any,
        clean: dict[str, Any],
        started: float,
    ) -> TaskResult:
        """A safe, lockless task in this process, under the same timeout and stop semantics as a
        worker: a sync handler runs in a thread, and a timeout asks it to stop and answers ``failed``."""
        me = process.current()
        inline = {INLINE: True, "timeout_s": spec.timeout_s}
        if where.given:
            # A caller-chosen id is claimed before the handler runs, so a twin call adopts this one. It
            # is on record as running in this process: a stop from anywhere finds it, and a process that
            # dies with it leaves a record that says so (``JobManager``'s inline handling).
            running = TaskResult(
                task_id=spec.task_id,
                execution_id=execution_id,
                status=TaskStatus.RUNNING,
                message=f"running inside pid {me.pid}",
                data=inline,
            )
            inserted = await _io(
                self.store.insert,
                running,
                caller=caller,
                params=clean,
                if_absent=True,
                starter=(me.pid, me.create_time),
                **where.record,
            )
            if not inserted:
                known = await _io(self.store.get, execution_id)
                assert known is not None
                return await self._attach(known, spec.task_id, None)
        ctx = WorkerContext(
            execution_id=execution_id,
            task_id=spec.task_id,
            home=self.home,
            params=params,
            paths=ExecutionPaths.of(self.home, execution_id),
            log=logging.getLogger(f"tether.task.{spec.task_id}"),
        )
        self.jobs.register_inline(execution_id, ctx)
        try:
            handler = load_object(spec.handler)
            if inspect.iscoroutinefunction(handler):
                value = await asyncio.wait_for(handler(ctx), spec.timeout_s)
            else:
                value = await asyncio.wait_for(asyncio.to_thread(handler, ctx), spec.timeout_s)
                if inspect.isawaitable(value):
                    value = await asyncio.wait_for(value, spec.timeout_s)
            message, data = outcome(value)
            status = TaskStatus.COMPLETED
        except TaskFailed as exc:
            status, message, data = TaskStatus.FAILED, exc.message, exc.data
        except StopRequested as exc:
            status, message, data = TaskStatus.STOPPED, exc.message, exc.data
        except TimeoutError:
            ctx.request_stop(TIMEOUT)  # a handler that polls should_stop() ends soon after
            status, message, data = (
                TaskStatus.FAILED,
                f"timed out after {spec.timeout_s:g}s",
                {"stop_reason": TIMEOUT},
            )
        except asyncio.CancelledError:
            ctx.request_stop("cancelled")
            raise
        except Exception as exc:
            log.exception("inline handler %s raised", spec.handler)
            status, message, data = TaskStatus.FAILED, f"{type(exc).__name__}: {exc}", {}
        finally:
            self.jobs.unregister_inline(execution_id)
        if status is TaskStatus.COMPLETED and ctx.stop_reason is not None and where.given:
            # It finished although a stop was asked: the record (a stop may have said so) and the
            # answer both say completed.
            data = {**data, "stop_came_late": ctx.stop_reason}
        result = bounded(
            TaskResult(
                task_id=spec.task_id,
                execution_id=execution_id,
                status=status,
                message=message,
                duration_seconds=round(time.monotonic() - started, 6),
                data={**data, **inline},
            )
        )
        try:
            if where.given:
                recorded = await _io(self.store.transition, result)
                if recorded.status is not result.status:  # the record ended otherwise first: it wins
                    return recorded.to_result()
            else:
                await _io(self.store.insert, result, caller=caller, params=clean, **where.record)
        except StoreError as exc:  # the handler ran: its result is still the answer
            log.warning("could not record %s: %s", execution_id, exc.message)
            return result.with_data(not_on_record=exc.message)
        return result

    # -- worker ---------------------------------------------------------------------------------

    async def _run_worker(
        self,
        spec: TaskSpec,
        execution_id: str,
        caller: str,
        where: _Where,
        clean: dict[str, Any],
        consent: Confirmation | None,
        detach: bool,
        started: float,
        on_start: Callable[[str], None] | None,
    ) -> TaskResult:
        paths = ExecutionPaths.of(self.home, execution_id)
        if self.registry.ref is None:
            raise ConfigError(
                "this registry has no ref: workers re-import the registry, so create it as "
                "Registry(ref='your.module:registry') in an importable module"
            )
        pending = TaskResult(
            task_id=spec.task_id, execution_id=execution_id, status=TaskStatus.PENDING, message="starting"
        )
        try:
            # The record comes first: no worker may exist that no record points to.
            inserted = await _io(
                self.store.insert,
                pending,
                caller=caller,
                params=clean,
                resources=spec.resources,
                background=spec.background,
                detached=detach,
                starter=(self._me.pid, self._me.create_time),
                confirmation=None if consent is None else consent.nonce,
                confirmed_by=None if consent is None else consent.source,
                if_absent=where.given,
                **where.record,
            )
        except ConfirmationUsed as used:
            return TaskResult(
                task_id=spec.task_id,
                execution_id=execution_id,
                status=TaskStatus.REJECTED,
                message=f"this confirmation was already used by execution {used.execution_id}; "
                "the person must confirm again",
                data={"needs_confirmation": True, "confirmation_used_by": used.execution_id},
            )
        except StoreError as exc:  # nothing was started: say why, as a result
            return TaskResult(
                task_id=spec.task_id, execution_id=execution_id, status=TaskStatus.FAILED,
                message=f"nothing was started: {exc.message}", data={"not_on_record": exc.message},
            )  # fmt: skip
        if not inserted:  # a twin call with this id got there first: follow that one
            known = await _io(self.store.get, execution_id)
            assert known is not None
            return await self._attach(known, spec.task_id, on_start)
        request = Request(
            execution_id=execution_id,
            task_id=spec.task_id,
            registry_ref=self.registry.ref,
            caller=caller,
            origin=where.origin,
            params=clean,
            confirmation=None
            if consent is None
            else RequestConfirmation(digest=consent.digest, source=consent.source, nonce=consent.nonce),
            env=worker_env((*self.registry.env, *self.settings.worker_env)),
            import_path=self._import_path,
            home=str(self.home),
            background=spec.background,
            detach=detach,
            parent_pid=self._me.pid,
            parent_create_time=self._me.create_time,
            parent_poll_s=self.settings.parent_poll_s,
            stop_grace_s=self.settings.stop_grace_cooperative_s,
            created_at=time.time(),
        )
        await _io(self._write_request, paths, request)
        with Wake.on(paths) as wake:  # listening before the worker exists: no ring is missed
            return await self._start_and_follow(spec, paths, wake=wake, started=started, on_start=on_start)

    async def _start_and_follow(
        self,
        spec: TaskSpec,
        paths: ExecutionPaths,
        *,
        wake: Wake,
        started: float,
        on_start: Callable[[str], None] | None,
    ) -> TaskResult:
        execution_id = paths.dir.name
        faults.point("executor.before_spawn")
        spawning = asyncio.ensure_future(asyncio.to_thread(self.spawner.spawn, paths))
        try:
            ref = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            # Cancelled while the worker was being started: ask it to stop at once (it honours that
            # before its handshake, so its handler never runs), let the start finish, then stop it.
            with contextlib.suppress(OSError):
                request_stop(paths, "cancelled")
            try:
                await spawning
            except (JobError, OSError):
                pass
            await asyncio.shield(self.jobs.stop(execution_id, reason="cancelled"))
            raise
        except (JobError, OSError) as exc:
            claim = await _io(abandon, paths, f"could not start a worker: {exc}")
            if claim.abandoned is not None:
                why = f"could not start a worker: {exc}"
                record = await _io(self.jobs.record, execution_id)
                finished = await _io(self.jobs.finish, record, paths, TaskStatus.FAILED, why)
                return finished.to_result()
            ref = process.ProcessRef(pid=claim.pid, create_time=claim.create_time)  # it started after all
        faults.point("executor.after_spawn")
        # Off the critical path, in order: the worker's own claim names it until the row does.
        self._record_later(execution_id, self.store.set_process, execution_id, ref.pid, ref.create_time)
        if on_start is not None:
            on_start(execution_id)
        try:
            result = await self._follow(spec, paths, ref, started, wake)
            self.spawner.reap()  # a fresh interpreter per task leaves a child to reap
            return result
        except asyncio.CancelledError:
            # The caller gave up (Ctrl-C, a cancelled turn): the execution must not outlive it silently.
            if not (spec.background and self._handshaken(paths)):
                await asyncio.shield(self.jobs.stop(execution_id, reason="cancelled"))
            raise

    def _write_request(self, paths: ExecutionPaths, request: Request) -> None:
        write_request(paths, sign(request, self._request_key()))

    def _request_key(self) -> bytes:
        """The home's request key, read again only when its file changed (it is replaced if damaged)."""
        path = self.home / KEYS_DIR / REQUEST_KEY
        try:
            stat = os.stat(path)
            seen: tuple[int, int, int] | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            seen = None
        if seen is None or seen != self._key_seen or self._key is None:
            key = request_key(self.home)
            assert key is not None  # created on first use
            self._key = key
            stat = os.stat(path)
            self._key_seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        return self._key

    def _handshaken(self, paths: ExecutionPaths) -> bool:
        try:
            result = read_result(paths)
        except ProtocolError:
            return False
        return result is not None and result.status is not TaskStatus.PENDING

    async def _record(self, write: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """A store write after the spawn, in order with the ones queued before it; the worker's own
        files stay the truth if the store is busy."""
        try:
            call = functools.partial(write, *args, **kwargs)
            await asyncio.get_running_loop().run_in_executor(self._writer, call)
        except StoreError as exc:
            log.warning("could not record the state of %s yet: %s", args[0] if args else "?", exc.message)

    def _record_later(self, execution_id: str, write: Callable[..., object], *args: Any) -> None:
        """Queue a store write that nothing waits for (the terminal write, queued after it, does); it is
        skipped if the execution's terminal state was recorded first (the terminal write carries it)."""

        def run() -> None:
            if execution_id in self._settled:
                return
            try:
                write(*args)
            except StoreError as exc:
                log.warning("could not record the state of %s yet: %s", execution_id, exc.message)

        self._writer.submit(run)

    async def _record_final(self, published: TaskResult, ref: process.ProcessRef) -> None:
        """The terminal state, with the worker that reached it, in one write; earlier queued writes of
        this execution that have not run yet are skipped (they say less)."""
        self._settled.add(published.execution_id)
        try:
            await self._record(self.store.transition, published, process=(ref.pid, ref.create_time))
        finally:
            self._settled.discard(published.execution_id)

    async def _follow(
        self,
        spec: TaskSpec,
        paths: ExecutionPaths,
        ref: process.ProcessRef,
        started: float,
        wake: Wake,
    ) -> TaskResult:
        execution_id = paths.dir.name
        wake.watch_exit(ref)
        rings = paths.doorbell.exists()  # else nothing rings when the worker publishes: poll
        handshake_deadline = time.monotonic() + self.settings.handshake_timeout_s
        run_deadline: float | None = None
        delay = 0.0005
        last_seen: tuple[int, int, int] | None = None
        claimed = False
        while True:
            if not claimed:
                # The claim names the worker that really runs the execution (a retried spawn may have
                # forked two; only one claimed it): follow that one.
                claim = _claim(paths)
                if claim is not None:
                    claimed = True
                    if claim.pid != ref.pid and claim.worker:
                        ref = process.ProcessRef(pid=claim.pid, create_time=claim.create_time)
                        wake.watch_exit(ref)
                        self._record_later(
                            execution_id, self.store.set_process, execution_id, ref.pid, ref.create_time
                        )
            try:
                stat = os.stat(paths.result)
                # os.replace makes a new inode each time: two writes within one mtime tick still differ.
                seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            except FileNotFoundError:
                seen = None
            if seen != last_seen:
                last_seen = seen
                try:
                    published = read_result(paths)
                except ProtocolError:
                    published = None
                if published is not None and published.status.terminal:
                    await self._record_final(published, ref)
                    return published
                if published is not None and published.status is TaskStatus.RUNNING and run_deadline is None:
                    if spec.background:  # the caller returns now: "running" must be on record first
                        await self._record(
                            self.store.transition, published, process=(ref.pid, ref.create_time)
                        )
                    else:
                        self._record_later(execution_id, self.store.transition, published)
                    if spec.background:
                        if process.is_alive(ref):
                            return published.with_data(pid=ref.pid, background=True)
                    elif spec.timeout_s is not None:
                        run_deadline = time.monotonic() + spec.timeout_s
                    if run_deadline is None:
                        run_deadline = float("inf")
            faults.point("executor.before_liveness")
            if not process.is_alive(ref):
                claim = _claim(paths)
                if claim is not None and claim.worker and claim.pid != ref.pid:
                    ref = process.ProcessRef(pid=claim.pid, create_time=claim.create_time)
                    wake.watch_exit(ref)
                    continue  # the worker that claimed the execution is the one to follow
                try:  # it may have published and exited between the look above and this one
                    published = read_result(paths)
                except ProtocolError:
                    published = None
                if published is not None and published.status.terminal:
                    await self._record_final(published, ref)
                    return published  # the same answer as when the publication is seen first
                await self.jobs.await_exit_code(paths, wake)
                record = await _io(self.jobs.reconcile, execution_id)
                return await _io(self.jobs.describe, record)
            now = time.monotonic()
            if run_deadline is None and now > handshake_deadline:
                await asyncio.to_thread(process.kill_tree, ref)
                await _until_dead(ref, self.settings.stop_grace_kill_s)
                record = await _io(self.jobs.record, execution_id)
                why = (
                    f"the worker did not complete its start handshake within "
                    f"{self.settings.handshake_timeout_s:g}s and was killed"
                )
                data = {"pid": ref.pid, "handshake_timeout_s": self.settings.handshake_timeout_s}
                finished = await _io(self.jobs.finish, record, paths, TaskStatus.FAILED, why, data)
                return finished.to_result()
            if run_deadline is not None and now > run_deadline:
                result = await self.jobs.stop(execution_id, reason=TIMEOUT)
                return (
                    result.model_copy(
                        update={"message": f"timed out after {spec.timeout_s:g}s; {result.message}"}
                    )
                    if result.status is not TaskStatus.COMPLETED
                    else result
                )
            if rings:
                # Woken the moment the worker publishes or exits; the timeout keeps watching deadlines.
                await wake.wait(LIVENESS_POLL_S)
            else:
                await wake.wait(delay)
                delay = min(delay * 1.5, MAX_POLL_S if run_deadline is None else POLL_S * 2)

    # -- control --------------------------------------------------------------------------------

    def _visible(self, execution_id: str, caller: str, origin: str | None) -> bool:
        """Whether ``caller`` may see the job: a person acting directly sees every job of the home
        (contract 9: any process can stop any job); any other caller only jobs of tasks exposed to it,
        and only ``origin``'s when it scopes itself to one."""
        record = self.store.get(execution_id) if isinstance(execution_id, str) else None
        if record is None:
            return False
        if caller in self.settings.operator_callers:
            return origin is None or record.origin == origin
        return self.registry.get(record.task_id, caller) is not None and (
            origin is None or record.origin == origin
        )

    MIN_PREFIX = 4

    def _by_prefix(self, prefix: object, caller: str, origin: str | None) -> str | list[str]:
        """The one visible job whose id starts with ``prefix``, else the visible ones that do."""
        if not isinstance(prefix, str) or len(prefix) < self.MIN_PREFIX or len(prefix) >= 19:
            return []
        visible = [i for i in self.store.ids_with_prefix(prefix, 5) if self._visible(i, caller, origin)]
        return visible[0] if len(visible) == 1 else visible

    async def control(
        self,
        execution_id: str,
        action: Action,
        *,
        caller: str,
        origin: str | None = None,
        reason: str | None = None,
    ) -> TaskResult:
        """Status, stop or wait for one job, as ``caller`` sees it (``origin``: only jobs it started).

        A job the caller may not see is answered exactly like one that does not exist: ``not_found``.
        """
        if action not in ACTIONS:
            raise ConfigError(f"unknown job action {action!r}; actions: {', '.join(ACTIONS)}")
        if not isinstance(caller, str) or not NAME_RE.match(caller):
            raise ConfigError(f"caller must be a name such as 'agent', 'cli' or 'mcp', got {caller!r}")
        if not await _io(self._visible, execution_id, caller, origin):
            shown = clip(str(execution_id), 80)
            found = await _io(self._by_prefix, execution_id, caller, origin)
            if isinstance(found, str):
                execution_id = found  # a unique prefix of a job this caller sees
            else:
                more = f"; it starts {len(found)} jobs: {', '.join(found)}" if found else ""
                return TaskResult(
                    task_id="unknown",
                    execution_id=shown,
                    status=TaskStatus.NOT_FOUND,
                    message=f"no job {shown!r} is visible to {caller}{more}",
                )
        if action == "status":
            return await _io(self.jobs.status, execution_id)
        if action == "wait":
            return await self.jobs.wait(execution_id)
        return await self.jobs.stop(execution_id, reason=reason or f"asked by {caller}")

    def jobs_for(
        self,
        caller: str,
        *,
        origin: str | None = None,
        active: bool = False,
        limit: int = 50,
        before: str | None = None,
    ) -> list[TaskResult]:
        """The jobs ``caller`` may see (see ``control``), newest first; ``before`` pages on."""
        task_ids = None
        if caller not in self.settings.operator_callers:
            task_ids = [spec.task_id for spec in self.registry.for_caller(caller)]
        return self.jobs.list(active=active, limit=limit, origin=origin, task_ids=task_ids, before=before)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Where:
    """Where an execution comes from, as it goes on record."""

    origin: str | None
    step_id: str | None
    given: bool  # the caller chose the execution id

    @property
    def record(self) -> dict[str, Any]:
        return {"origin": self.origin, "step_id": self.step_id}


async def _io(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking work (a store transaction, a file fsync, a flock) off the event loop."""
    return await asyncio.to_thread(function, *args, **kwargs)


def import_root(ref: str) -> str | None:
    """The sys.path entry the registry's module was imported from (``/work`` for ``/work/myapp/tasks.py``
    as ``myapp.tasks``), or None when it is not a file of its own."""
    module = sys.modules.get(ref.partition(":")[0])
    where = getattr(module, "__file__", None)
    if not where:
        return None
    path = Path(where).resolve()
    levels = ref.partition(":")[0].count(".") + (1 if path.name == "__init__.py" else 0)
    try:
        return str(path.parents[levels])
    except IndexError:
        return None


def _claim(paths: ExecutionPaths) -> Claim | None:
    try:
        return read_claim(paths)
    except ProtocolError:
        return None


def _claim_alive(paths: ExecutionPaths) -> bool:
    claim = _claim(paths)
    return (
        claim is not None
        and claim.worker
        and process.is_alive(process.ProcessRef(pid=claim.pid, create_time=claim.create_time))
    )


async def _until_dead(ref: process.ProcessRef, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    # Another process's state: there is nothing to await, so it is polled with a deadline.
    while process.is_alive(ref) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(POLL_S)


def _on_record(params: object) -> dict[str, Any]:
    """What a refused call's params look like on record: as given when small, else a note of their size."""
    import json

    try:
        encoded = json.dumps(params if params is not None else {}, ensure_ascii=False, default=repr)
    except (ValueError, RecursionError):
        return {"_omitted": "params that are not JSON"}
    if len(encoded) > MAX_PARAMS_BYTES:
        return {"_omitted": f"params of {len(encoded)} characters, over the limit"}
    value = json.loads(encoded)
    return value if isinstance(value, dict) else {"_raw": clip(encoded, 200)}
