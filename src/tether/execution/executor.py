"""The executor: the trust boundary every execution passes through, from every interface (contract 2).

``execute(task_id, params, caller=...)`` runs these steps in order and answers every refusal with a
structured ``TaskResult``, never an exception:

1. a new ``execution_id``;
2. look up the spec; 3. exposure check (unknown and unexposed are both ``not_found``);
4. validate params (pydantic + domain catalogs; wrong values come back with the allowed ones);
5. danger policy (``destructive`` needs ``confirmed=True``, which only the person may set);
6. one active job per resource; 7. environment pre-check (``requires``);
8. write ``request.json`` and start the worker; 9. wait for the result (sync) or the ``running``
   handshake (background). ``inline`` tasks run in this process after the same checks.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import secrets
import time
from collections.abc import Callable
from typing import Any

from tether.config import Settings, resolve_home
from tether.errors import ConfigError, JobError, TaskFailed, ToolRejected
from tether.execution import process
from tether.execution.jobs import POLL_S, JobManager
from tether.execution.protocol import (
    TIMEOUT,
    ExecutionPaths,
    ProtocolError,
    Request,
    read_result,
    write_request,
)
from tether.execution.spawner import Spawner, default_spawner
from tether.execution.worker import WorkerContext, outcome
from tether.store.repo import JobRepo
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import NAME_RE, Danger, Isolation, Registry, TaskSpec, load_object
from tether.tasks.validation import validate_params

log = logging.getLogger("tether.executor")

MAX_POLL_S = 0.02


def new_execution_id() -> str:
    """Sortable by start time (millisecond hex prefix), unique by 32 random bits."""
    return f"{time.time_ns() // 1_000_000:011x}{secrets.token_hex(4)}"


class Executor:
    """Runs tasks of one registry in one tether home. Use as a context manager, or call ``close()``."""

    def __init__(
        self,
        registry: Registry,
        *,
        home: str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
        spawner: Spawner | None = None,
    ) -> None:
        self.registry = registry
        self.home = resolve_home(home)
        self.settings = settings if settings is not None else Settings.load(self.home)
        self.store = JobRepo.in_home(self.home)
        self._spawner = spawner
        self.jobs = JobManager(self.home, self.store, self.settings, spawner)
        self._me = process.current()

    @property
    def spawner(self) -> Spawner:
        if self._spawner is None:
            if self.registry.ref is None:
                raise ConfigError("a registry without a ref cannot start workers")
            self._spawner = default_spawner(self.registry.ref, self.home, forkserver=self.settings.forkserver)
            self.jobs.spawner = self._spawner
        return self._spawner

    def warm_up(self) -> None:
        """Start the worker spawner now rather than on the first task."""
        start = getattr(self.spawner, "start", None)
        if start is not None:
            start()

    def close(self) -> None:
        if self._spawner is not None:
            self._spawner.close()
        self.store.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute_sync(self, task_id: str, params: dict[str, Any] | None = None, **kwargs: Any) -> TaskResult:
        return asyncio.run(self.execute(task_id, params, **kwargs))

    async def execute(
        self,
        task_id: str,
        params: dict[str, Any] | None = None,
        *,
        caller: str,
        confirmed: bool = False,
        detach: bool = False,
        on_start: Callable[[str], None] | None = None,
    ) -> TaskResult:
        """Run one task for ``caller``; ``confirmed`` only ever from the person, never from a model.

        ``on_start(execution_id)`` is called once a worker process exists (to follow its progress).
        """
        started = time.monotonic()
        execution_id = new_execution_id()

        def refuse(status: TaskStatus, message: str, data: dict[str, Any] | None = None) -> TaskResult:
            result = TaskResult(
                task_id=task_id,
                execution_id=execution_id,
                status=status,
                message=message,
                duration_seconds=round(time.monotonic() - started, 6),
                data=data or {},
            )
            self.store.insert(result, caller=caller, params=_jsonable(params), detached=detach)
            return result

        if not isinstance(caller, str) or not NAME_RE.match(caller):
            raise ConfigError(f"caller must be a name such as 'agent', 'cli' or 'mcp', got {caller!r}")
        spec = self.registry.get(task_id, caller) if isinstance(task_id, str) else None
        if spec is None:
            task_id = str(task_id)
            similar = self.registry.similar(task_id, caller)
            hint = f"; did you mean {', '.join(similar)}?" if similar else ""
            return refuse(
                TaskStatus.NOT_FOUND,
                f"no task {task_id!r} is available to {caller}{hint}",
                {"similar": similar},
            )
        try:
            validated = validate_params(spec, params)
        except ToolRejected as exc:
            return refuse(TaskStatus.REJECTED, exc.message, exc.data)
        clean = {} if validated is None else validated.model_dump(mode="json")
        if spec.danger is Danger.DESTRUCTIVE and not confirmed:
            return refuse(
                TaskStatus.REJECTED,
                f"{task_id} is destructive: it runs only after the person explicitly confirms it",
                {"needs_confirmation": True, "danger": spec.danger.value, "params": clean},
            )
        blocker = self.jobs.blocking(spec.resources)
        if blocker is not None:
            shared = sorted(set(blocker.resources) & set(spec.resources))
            return refuse(
                TaskStatus.REJECTED,
                f"resource {', '.join(shared)} is in use by execution {blocker.execution_id} "
                f"({blocker.task_id}); stop it or wait for it to end",
                {"blocked_by": blocker.execution_id, "blocking_task": blocker.task_id, "resource": shared[0]},
            )
        try:
            unmet = self.registry.unmet(spec, self.home)
        except Exception as exc:
            return refuse(TaskStatus.FAILED, f"precondition check failed: {type(exc).__name__}: {exc}")
        if unmet:
            return refuse(TaskStatus.REJECTED, unmet, {"unmet": list(spec.requires)})

        if spec.isolation is Isolation.INLINE:
            return await self._run_inline(spec, execution_id, caller, validated, clean, started)
        return await self._run_worker(spec, execution_id, caller, clean, detach, started, on_start)

    # -- inline ---------------------------------------------------------------------------------

    async def _run_inline(
        self,
        spec: TaskSpec,
        execution_id: str,
        caller: str,
        params: Any,
        clean: dict[str, Any],
        started: float,
    ) -> TaskResult:
        ctx = WorkerContext(
            execution_id=execution_id,
            task_id=spec.task_id,
            home=self.home,
            params=params,
            paths=ExecutionPaths.of(self.home, execution_id),
            log=logging.getLogger(f"tether.task.{spec.task_id}"),
        )
        try:
            value = load_object(spec.handler)(ctx)
            if inspect.isawaitable(value):
                value = await value
            message, data = outcome(value)
            status = TaskStatus.COMPLETED
        except TaskFailed as exc:
            status, message, data = TaskStatus.FAILED, exc.message, exc.data
        except Exception as exc:
            log.exception("inline handler %s raised", spec.handler)
            status, message, data = TaskStatus.FAILED, f"{type(exc).__name__}: {exc}", {}
        result = TaskResult(
            task_id=spec.task_id,
            execution_id=execution_id,
            status=status,
            message=message,
            duration_seconds=round(time.monotonic() - started, 6),
            data=data,
        )
        self.store.insert(result, caller=caller, params=clean)
        return result

    # -- worker ---------------------------------------------------------------------------------

    async def _run_worker(
        self,
        spec: TaskSpec,
        execution_id: str,
        caller: str,
        clean: dict[str, Any],
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
        request = Request(
            execution_id=execution_id,
            task_id=spec.task_id,
            registry_ref=self.registry.ref,
            caller=caller,
            params=clean,
            home=str(self.home),
            background=spec.background,
            detach=detach,
            parent_pid=self._me.pid,
            parent_create_time=self._me.create_time,
            parent_poll_s=self.settings.parent_poll_s,
            stop_grace_s=self.settings.stop_grace_cooperative_s,
            created_at=time.time(),
        )
        write_request(paths, request)
        pending = TaskResult(
            task_id=spec.task_id, execution_id=execution_id, status=TaskStatus.PENDING, message="starting"
        )
        self.store.insert(
            pending,
            caller=caller,
            params=clean,
            resources=spec.resources,
            background=spec.background,
            detached=detach,
        )
        spawning = asyncio.ensure_future(asyncio.to_thread(self.spawner.spawn, paths))
        try:
            ref = await asyncio.shield(spawning)
        except asyncio.CancelledError:
            # Cancelled while the worker was being started: let the start finish, then stop it.
            try:
                ref = await spawning
            except (JobError, OSError):
                raise asyncio.CancelledError from None
            self.store.set_process(execution_id, ref.pid, ref.create_time)
            await self.jobs.stop(execution_id, reason="cancelled")
            raise
        except (JobError, OSError) as exc:
            return self.store.transition(
                pending.model_copy(
                    update={"status": TaskStatus.FAILED, "message": f"could not start a worker: {exc}"}
                )
            ).to_result()
        self.store.set_process(execution_id, ref.pid, ref.create_time)
        if on_start is not None:
            on_start(execution_id)
        try:
            result = await self._follow(spec, paths, ref, started)
            self.spawner.reap()  # a fresh interpreter per task leaves a child to reap
            return result
        except asyncio.CancelledError:
            # The caller gave up (Ctrl-C, a cancelled turn): the execution must not outlive it silently.
            if not (spec.background and self._handshaken(paths)):
                await asyncio.shield(self.jobs.stop(execution_id, reason="cancelled"))
            raise

    def _handshaken(self, paths: ExecutionPaths) -> bool:
        try:
            result = read_result(paths)
        except (ProtocolError, ValueError):
            return False
        return result is not None and result.status is not TaskStatus.PENDING

    async def _follow(
        self, spec: TaskSpec, paths: ExecutionPaths, ref: process.ProcessRef, started: float
    ) -> TaskResult:
        execution_id = paths.dir.name
        handshake_deadline = time.monotonic() + self.settings.handshake_timeout_s
        run_deadline: float | None = None
        delay = 0.0005
        last_mtime: tuple[int, int, int] | None = None
        published: TaskResult | None = None
        while True:
            try:
                stat = os.stat(paths.result)
                # os.replace makes a new inode each time: two writes within one mtime tick still differ.
                mtime = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            except FileNotFoundError:
                mtime = None
            if mtime != last_mtime:
                last_mtime = mtime
                try:
                    published = read_result(paths)
                except (ProtocolError, ValueError):
                    published = None
                if published is not None and published.status.terminal:
                    self.store.transition(published)
                    return published
                if published is not None and published.status is TaskStatus.RUNNING and run_deadline is None:
                    self.store.transition(published)
                    if spec.background:
                        if process.is_alive(ref):
                            return published.with_data(pid=ref.pid, background=True)
                    elif spec.timeout_s is not None:
                        run_deadline = time.monotonic() + spec.timeout_s
                    if run_deadline is None:
                        run_deadline = float("inf")
            if not process.is_alive(ref):
                return self.jobs.describe(self.jobs.reconcile(execution_id))
            now = time.monotonic()
            if run_deadline is None and now > handshake_deadline:
                record = self.jobs.record(execution_id)
                await asyncio.to_thread(process.kill_tree, ref)
                return self.jobs.finish(
                    record,
                    paths,
                    TaskStatus.FAILED,
                    f"the worker did not complete its start handshake within "
                    f"{self.settings.handshake_timeout_s:g}s and was killed",
                    {"pid": ref.pid, "handshake_timeout_s": self.settings.handshake_timeout_s},
                ).to_result()
            if run_deadline is not None and now > run_deadline:
                result = await self.jobs.stop(execution_id, reason=TIMEOUT)
                return (
                    result.model_copy(
                        update={"message": f"timed out after {spec.timeout_s:g}s; {result.message}"}
                    )
                    if result.status is not TaskStatus.COMPLETED
                    else result
                )
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, MAX_POLL_S if run_deadline is None else POLL_S * 2)


def _jsonable(params: object) -> dict[str, Any]:
    if isinstance(params, dict):
        return {
            str(k): (v if isinstance(v, str | int | float | bool | None) else repr(v))
            for k, v in params.items()
        }
    return {} if params is None else {"_raw": repr(params)[:200]}
