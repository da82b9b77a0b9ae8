"""The worker: one process runs one task and publishes its state in result.json (contract 6).

``python -m tether.execution.worker <execution dir>``. First the worker claims its execution
(``result.json``, created exactly once): if an observer gave the execution up first, or another worker
ran it, it leaves without doing anything. Then it trusts nothing from its parent but the request file,
and only when the home's key signed it: it re-resolves the spec from the registry, re-validates the
params, re-checks the danger policy (a ``caution``/``destructive`` call needs the person's confirmation
of exactly these arguments), honours a stop that arrived before it started, takes the resource locks,
re-checks the preconditions (closing the race between the parent's pre-check and now), then publishes
``running`` (the handshake), imports the handler lazily and runs it.

A non-detached worker — or a detached one tied to its executor's hold on a resource — watches the
process that started it and stops itself when that process dies: cooperatively first, then by
interrupting itself, then by killing its own process group.
"""

from __future__ import annotations

import _thread
import contextlib
import inspect
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import tether.telemetry as telemetry
from tether.errors import LockBusy, StopRequested, TaskFailed, TetherError, ToolRejected
from tether.execution import faults, process
from tether.execution.lock import LockSet
from tether.execution.protocol import (
    ExecutionPaths,
    ProtocolError,
    Request,
    append_event,
    bounded,
    claim_for_worker,
    private_mkdir,
    publish,
    read_claim,
    read_request,
    request_key,
    signed_by,
    stop_reason,
    stopped_status,
)
from tether.tasks.confirm import call_digest
from tether.tasks.function import invoke, is_function_task
from tether.tasks.grants import Grants
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import Danger, Registry, TaskSpec, load_object
from tether.tasks.validation import validate_params

STOP_POLL_S = 0.05
MAX_PROGRESS_BYTES = 16 * 1024 * 1024  # progress one execution may write (events.jsonl and its log)
PARENT_EXITED = "parent_exited"


class WorkerContext:
    """The ``TaskContext`` a handler receives in a worker (or inline in the executor)."""

    def __init__(
        self,
        *,
        execution_id: str,
        task_id: str,
        home: Path,
        params: BaseModel | None,
        paths: ExecutionPaths | None,
        log: logging.Logger,
    ) -> None:
        self.execution_id = execution_id
        self.task_id = task_id
        self.home = home
        self.log = log
        self._params = params
        self._paths = paths
        self._stop = threading.Event()
        self.stop_reason: str | None = None
        self._progress_bytes = 0
        self._progress_dropped = 0

    @property
    def params(self) -> BaseModel | None:
        return self._params

    def request_stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason
        self._stop.set()

    def should_stop(self) -> bool:
        if self._stop.is_set():
            return True
        if self._paths is not None and self._paths.stop.exists():
            self.request_stop(stop_reason(self._paths) or "stop")
            return True
        return False

    def check_stop(self) -> None:
        if self.should_stop():
            raise StopRequested(f"stop requested ({self.stop_reason})", reason=self.stop_reason)

    def sleep(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self.should_stop():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            self._stop.wait(min(left, STOP_POLL_S))
        return False

    def progress(self, fraction: float | None, message: str = "", **data: Any) -> None:
        if fraction is not None:
            fraction = min(1.0, max(0.0, float(fraction)))
        if self._paths is None:
            return
        # A handler that reports without end (a command's output, hours long) must not fill the disk:
        # past the cap, reports are counted, not written.
        self._progress_bytes += len(message) + 64
        if self._progress_bytes > MAX_PROGRESS_BYTES:
            self._progress_dropped += 1
            if self._progress_dropped == 1:
                note = f"progress reports past {MAX_PROGRESS_BYTES // (1024 * 1024)} MiB are not kept"
                append_event(self._paths, "progress", fraction=fraction, message=note)
                self.log.warning(note)
            return
        private_mkdir(self._paths.dir)
        append_event(self._paths, "progress", fraction=fraction, message=message, **data)
        self.log.info("progress %s %s", "?" if fraction is None else f"{fraction:.0%}", message)


def outcome(value: object) -> tuple[str, dict[str, Any]]:
    """Turn what a handler returned into (message, data)."""
    if value is None:
        return "done", {}
    if isinstance(value, str):
        return value, {}
    if isinstance(value, Mapping):
        return "done", dict(value)
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], Mapping)
    ):
        return value[0], dict(value[1])
    raise TypeError(f"a handler returns None, str, a mapping or (str, mapping), not {type(value).__name__}")


def call_handler(handler: Any, ctx: WorkerContext) -> object:
    """Call a sync or async handler in a worker (which has no event loop of its own yet); a function
    made a task with ``@registry.task`` gets its parameters by name."""
    value = invoke(handler, ctx) if is_function_task(handler) else handler(ctx)
    if inspect.isawaitable(value):
        import asyncio

        awaitable: Awaitable[object] = value

        async def _await() -> object:
            return await awaitable

        return asyncio.run(_await())
    return value


class _Publisher:
    """Serializes the worker's writes: the main thread and the parent watch may both try to finish."""

    def __init__(self, paths: ExecutionPaths, request: Request) -> None:
        self.paths = paths
        self.request = request
        self.started = time.monotonic()
        self.finished = threading.Event()
        self._lock = threading.Lock()

    def result(self, status: TaskStatus, message: str, data: dict[str, Any] | None = None) -> TaskResult:
        return bounded(
            TaskResult(
                task_id=self.request.task_id,
                execution_id=self.request.execution_id,
                status=status,
                message=message,
                duration_seconds=round(time.monotonic() - self.started, 6),
                data=data or {},
            ),
            self.paths.dir,
        )

    def running(self, data: dict[str, Any]) -> bool:
        """The handshake; False when the job already ended (stopped before it started, say)."""
        with self._lock:
            if self.paths.stop.exists():
                return False
            wanted = self.result(TaskStatus.RUNNING, "running", data)
            return publish(self.paths, wanted).status is TaskStatus.RUNNING

    def final(self, status: TaskStatus, message: str, data: dict[str, Any] | None = None) -> bool:
        with self._lock:
            if self.finished.is_set():
                return False
            publish(self.paths, self.result(status, message, data))
            self.finished.set()
            return True


def _watch_parent(
    request: Request, ctx: WorkerContext, publisher: _Publisher, log: logging.Logger, release_locks: Any
) -> None:
    parent = process.ProcessRef(pid=request.parent_pid, create_time=request.parent_create_time)
    while not publisher.finished.wait(request.parent_poll_s):
        if process.is_alive(parent):
            continue
        log.warning("the process that started this job (pid %d) exited: stopping", parent.pid)
        ctx.request_stop(PARENT_EXITED)
        if publisher.finished.wait(request.stop_grace_s):
            return
        _thread.interrupt_main()
        if publisher.finished.wait(request.stop_grace_s):
            return
        release_locks()
        publisher.final(
            TaskStatus.STOPPED, "stopped: the process that started it exited", {"stop_step": "kill"}
        )
        _kill_own_group()


def _kill_own_group() -> None:
    logging.shutdown()
    if sys.platform == "win32":
        os._exit(1)
    process.end_descendants(os.getpid())  # those that left the group too (a setsid grandchild)
    os.killpg(os.getpid(), signal.SIGKILL)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


_STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def _hold_stop_signals(hold: bool) -> None:
    if hasattr(signal, "pthread_sigmask"):  # POSIX; elsewhere a stop is a process kill anyway
        signal.pthread_sigmask(signal.SIG_BLOCK if hold else signal.SIG_UNBLOCK, _STOP_SIGNALS)


def consent_problem(spec: TaskSpec, request: Request, clean: dict[str, Any]) -> str | None:
    """Why the danger policy refuses this request, or None: anything not ``safe`` runs only with a
    confirmation of exactly this call (the executor turns a direct caller's own command into one)."""
    danger = spec.danger_for(clean)
    if danger is Danger.SAFE:
        return None
    confirmation = request.confirmation
    if confirmation is None:
        return f"{spec.task_id} is {danger.value}: it runs only with the person's confirmation"
    if confirmation.digest != call_digest(spec.task_id, clean):
        return f"{spec.task_id}: the confirmation on record is for other arguments than these"
    return None


def run(request: Request, paths: ExecutionPaths, log: logging.Logger, *, signed: bool) -> int:
    """Run ``request``'s task; ``signed``: whether the home's key signed it (checked once, in ``main``)."""
    me = process.current()
    # Orphans of the handler's processes stay below this worker instead of going to init: a
    # double-forked, setsid grandchild is still in the tree that a stop ends.
    process.become_subreaper()
    faults.point("worker.before_claim")
    if not _claim(request, paths, me, log):
        return 0
    faults.point("worker.after_claim")
    publisher = _Publisher(paths, request)
    admitted = _admit(request, paths, publisher, signed)
    if admitted is None:
        return 0
    registry, spec, params = admitted
    locks = LockSet(Path(request.home), spec.resources)
    try:
        locks.acquire(execution_id=request.execution_id, task_id=request.task_id)
    except LockBusy as exc:
        publisher.final(TaskStatus.REJECTED, exc.message, exc.data)
        return 0
    try:
        _run_locked(request, paths, log, publisher, registry, spec, params, locks)
    finally:
        locks.release()
    return 0


def _claim(request: Request, paths: ExecutionPaths, me: process.ProcessRef, log: logging.Logger) -> bool:
    """Claim the execution (``result.json``, created once); False when an observer gave it up first or
    another worker claimed it: then this one leaves without doing anything."""
    if claim_for_worker(paths, me.pid, me.create_time):
        return True
    try:
        claim = read_claim(paths)
    except ProtocolError:
        claim = None
    why = claim.abandoned if claim is not None and claim.abandoned else "another worker claimed it"
    log.warning("not running %s: %s", request.execution_id, why)
    return False


def _admit(
    request: Request, paths: ExecutionPaths, publisher: _Publisher, signed: bool
) -> tuple[Registry, TaskSpec, BaseModel | None] | None:
    """Trust nothing from the parent but the signed request: check it again from scratch. The registry,
    spec and params to run, or None once a refusal (or a stop that came first) is published."""
    if not signed or request.execution_id != paths.dir.name:
        publisher.final(
            TaskStatus.REJECTED,
            "refused: this request was not written by this home's executor (missing or wrong signature)",
        )
        return None
    parent = process.ProcessRef(pid=request.parent_pid, create_time=request.parent_create_time)
    if (not request.detach or request.tied) and not process.is_alive(parent):
        publisher.final(
            TaskStatus.STOPPED,
            "stopped before it started: the process that started it exited",
            {"stop_reason": PARENT_EXITED},
        )
        return None
    if paths.stop.exists():
        _stopped_before_start(paths, publisher)
        return None
    if request.import_path and request.import_path not in sys.path:
        sys.path.append(request.import_path)
    try:
        registry = Registry.load(request.registry_ref)
        if registry.get(request.task_id) is None:  # a task the home's settings add (an imported MCP tool)
            registry = registry.for_home(Path(request.home))
    except TetherError as exc:
        publisher.final(TaskStatus.FAILED, f"worker cannot load the registry: {exc.message}")
        return None
    try:
        grants = Grants.from_json(request.grants)
    except TetherError as exc:
        publisher.final(TaskStatus.REJECTED, f"the request's grants are not valid: {exc.message}")
        return None
    spec = registry.get(request.task_id, request.caller, grants)
    if spec is None:
        publisher.final(TaskStatus.NOT_FOUND, f"unknown task {request.task_id!r}")
        return None
    try:
        params = validate_params(spec, request.params)
    except ToolRejected as exc:
        publisher.final(TaskStatus.REJECTED, exc.message, exc.data)
        return None
    clean = {} if params is None else params.model_dump(mode="json")
    refusal = consent_problem(spec, request, clean)
    if refusal is not None:
        danger = spec.danger_for(clean).value
        publisher.final(TaskStatus.REJECTED, refusal, {"needs_confirmation": True, "danger": danger})
        return None
    return registry, spec, params


def _stopped_before_start(paths: ExecutionPaths, publisher: _Publisher) -> None:
    reason = stop_reason(paths) or "stop"
    publisher.final(stopped_status(reason), f"stopped before it started ({reason})", {"stop_reason": reason})


def _run_locked(
    request: Request,
    paths: ExecutionPaths,
    log: logging.Logger,
    publisher: _Publisher,
    registry: Registry,
    spec: TaskSpec,
    params: BaseModel | None,
    locks: LockSet,
) -> None:
    """With the locks held: re-check the preconditions, shake hands, run the handler, publish.
    Every terminal state is published with the locks already free."""
    home = Path(request.home)
    try:
        unmet = registry.unmet(spec, home)
    except Exception as exc:
        locks.release()
        publisher.final(TaskStatus.FAILED, f"precondition check failed: {type(exc).__name__}: {exc}")
        return
    if unmet:
        locks.release()
        publisher.final(TaskStatus.REJECTED, unmet, {"unmet": list(spec.requires)})
        return
    ctx = WorkerContext(
        execution_id=request.execution_id,
        task_id=request.task_id,
        home=home,
        params=params,
        paths=paths,
        log=log,
    )
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # From here until the handler's own ``try`` a stop signal waits in the kernel: one that came in
    # between would end the worker with neither the handler's outcome nor "stopped" published. Blocked
    # before the parent watch starts, so that thread cannot take the signal in the main thread's place.
    _hold_stop_signals(True)
    if not request.detach or request.tied:
        threading.Thread(
            target=_watch_parent,
            args=(request, ctx, publisher, log, locks.release),
            name="parent-watch",
            daemon=True,
        ).start()
    faults.point("worker.before_handshake")
    if not publisher.running({"pid": os.getpid(), "background": request.background}):
        # A stop arrived before the handshake: the handler must not run at all.
        locks.release()
        _stopped_before_start(paths, publisher)
        return
    faults.point("worker.after_handshake")
    log.debug("running %s %s", request.task_id, request.params)
    status, message, data = _run_handler(spec.handler, ctx, log)
    # The outcome is decided: a late SIGINT/SIGTERM must not turn it into a lost result.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if status is not TaskStatus.COMPLETED:
        # What the handler started ends with a task that did not complete (a completed one may
        # leave a process running on purpose: demo.start_game leaves the game).
        ended = process.end_descendants(os.getpid())
        if ended:
            log.info("ended %d process(es) the task had started", ended)
            data = {**data, "ended_processes": ended}
    # Release before publishing: whoever sees the terminal state may start the next task at once.
    locks.release()
    publisher.final(status, message, data)
    log.debug("%s: %s", status.value, message)  # the outcome is on record: an empty log is removed


def _run_handler(
    handler_path: str, ctx: WorkerContext, log: logging.Logger
) -> tuple[TaskStatus, str, dict[str, Any]]:
    try:
        _hold_stop_signals(False)  # a stop that came since the handshake is raised here, and caught
        handler = load_object(handler_path)
        message, data = outcome(call_handler(handler, ctx))
        return TaskStatus.COMPLETED, message, data
    except (StopRequested, KeyboardInterrupt) as exc:
        ctx.should_stop()  # picks up the reason in stop.requested (a timeout, say) if there is one
        ctx.request_stop("interrupt")
        reason = ctx.stop_reason or "interrupt"
        status = stopped_status(reason)
        detail = exc.message if isinstance(exc, StopRequested) else "interrupted"
        data = {**(exc.data if isinstance(exc, StopRequested) else {}), "stop_reason": reason}
        return status, f"{status.value} ({reason}): {detail}", data
    except TaskFailed as exc:
        return TaskStatus.FAILED, exc.message, exc.data
    except Exception as exc:
        log.exception("handler %s raised", handler_path)
        return TaskStatus.FAILED, f"{type(exc).__name__}: {exc}", {"exception": type(exc).__name__}


def _logger(execution_id: str) -> logging.Logger:
    log = logging.getLogger(f"tether.task.{execution_id}")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def _signed(request: Request) -> bool:
    key = request_key(Path(request.home), create=False)
    return key is not None and signed_by(request, key)


def _adopt_environment(request: Request, signed: bool) -> None:
    """Take the environment the executor allowlisted and signed, whoever forked this worker (a fork
    server or the CLI server holds the environment it started with). An unsigned request changes
    nothing: ``run`` refuses it."""
    if not signed or os.environ == request.env:  # a fork server started with the same environment
        return
    os.environ.clear()
    os.environ.update(request.env)
    faults.reload()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tether.execution.worker <execution dir>", file=sys.stderr)
        return 2
    if argv is None:  # a fresh interpreter: its starter may hand it secrets through a pipe
        import tether.credentials as credentials

        credentials.adopt_environment()
    paths = ExecutionPaths(Path(args[0]))
    try:
        request = read_request(paths)
    except (ProtocolError, ValueError) as exc:
        print(f"tether worker: unreadable request: {exc}", file=sys.stderr)
        return 3
    signed = _signed(request)
    _adopt_environment(request, signed)
    log = _logger(request.execution_id)
    try:
        with telemetry.worker_span(request.trace, Path(request.home), request.task_id, request.execution_id):
            return run(request, paths, log, signed=signed)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
