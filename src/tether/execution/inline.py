"""Inline runs: a safe, lockless task handled in the executor's own process.

An ``inline`` task passed the same admission as any other, and runs under the same timeout and stop
semantics as a worker: a sync handler runs in a thread, an async one on the loop, and a timeout asks it
to stop and answers ``failed``. While it runs it is registered with the ``JobManager``, so a stop from
anywhere reaches it. A caller-chosen execution id is claimed on record (``running inside pid …``) before
the handler starts: a twin call adopts this run instead of running the handler twice, and a process that
dies mid-run leaves a record the job manager recognises as ended. The terminal state goes on record
last; if the record already ended otherwise (a stop settled it first), the record wins.

A caller may add writes of its own to those two transactions (a ``Journal``): a flow's attempt goes on
record with its job's claim and ends with its job's end, in the same commits. A call whose checks need
nothing but its spec and arguments may also be claimed in a transaction of its caller's (``Claim``,
``Executor.claim_in``): the flow engine claims the next call in the one that ends the call before it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.errors import StopRequested, StoreError, TaskFailed
from tether.execution import faults, process
from tether.execution.admission import Admitted, Where, nothing_started, record_refusal
from tether.execution.jobs import INLINE, JobManager
from tether.execution.output import to_log
from tether.execution.protocol import TIMEOUT, ExecutionPaths, bounded
from tether.execution.records import off_loop
from tether.execution.worker import WorkerContext, outcome
from tether.store.jobs import JobRecord, JobStore
from tether.tasks.function import invoke, is_function_task
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import TaskSpec, load_object

log = logging.getLogger("tether.executor")

Outcome = tuple[TaskStatus, str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Journal:
    """A caller's writes, made in an inline call's own transactions: ``started(conn)`` in the one that
    claims its execution id, before its handler runs (not when a twin claimed it first); ``ended(conn,
    record)`` in the one that ends it, given the job's record as it then is (a stop that came first
    wins). Each is made at most once, and neither when the call was refused or attached to a twin: the
    caller keeps track of which were made."""

    started: Callable[[Any], None]
    ended: Callable[[Any, JobRecord], None]
    then: Callable[[Any], None] | None = None  # after the end and its event, in its transaction


@dataclass(eq=False)
class Claim:
    """An inline call admitted and claimed by ``Executor.claim_in`` in its caller's transaction: what
    ``Executor.run_claimed`` runs, once, when that transaction has committed."""

    admitted: Admitted
    execution_id: str
    caller: str
    where: Where


def _inline(spec: TaskSpec) -> dict[str, Any]:
    """What an inline job's record says of it, from its claim to its end."""
    return {INLINE: True, "timeout_s": spec.timeout_s}


def claim_of(spec: TaskSpec, execution_id: str) -> tuple[TaskResult, tuple[int, float]]:
    """The record that claims an inline call's execution id for this process (running inside it), and
    the process (pid, create time) it names."""
    me = process.current()
    running = TaskResult(
        task_id=spec.task_id,
        execution_id=execution_id,
        status=TaskStatus.RUNNING,
        message=f"running inside pid {me.pid}",
        data=_inline(spec),
    )
    return running, (me.pid, me.create_time)


def claimed_in(store: JobStore, conn: Any, claim: Claim, started: Callable[[Any], None]) -> Claim | None:
    """``claim``'s id on record as running in this process, in the caller's transaction ``conn`` with
    its ``started(conn)``; None, nothing written, when the id was on record already."""
    running, starter = claim_of(claim.admitted.spec, claim.execution_id)
    inserted = store.insert_in(
        conn, running, caller=claim.caller, params=claim.admitted.clean, if_absent=True, starter=starter,
        also=started, **claim.where.record,
    )  # fmt: skip
    return claim if inserted else None


def given_up(claim: Claim) -> TaskResult:
    """The end of a claim that will not run: it provably never ran (``never_started``), so the decision
    that meets its attempt runs it again instead of following a claim nobody runs."""
    return TaskResult(
        task_id=claim.admitted.spec.task_id,
        execution_id=claim.execution_id,
        status=TaskStatus.FAILED,
        message="never started: the process that claimed it gave it up",
        data={**_inline(claim.admitted.spec), "never_started": True},
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class InlineRun:
    """One inline execution of an admitted call."""

    home: Path
    store: JobStore
    jobs: JobManager
    admitted: Admitted
    execution_id: str
    caller: str
    where: Where
    started: float
    attach: Callable[[JobRecord], Awaitable[TaskResult]]  # follows a twin call's run instead
    journal: Journal | None = None
    claimed: bool = False  # its id is on record as running here already (``Executor.claim_in``)

    @property
    def spec(self) -> TaskSpec:
        return self.admitted.spec

    async def run(self) -> TaskResult:
        inline = _inline(self.spec)
        if self.where.given and not self.claimed:
            try:
                known = await self._claim()
            except StoreError as exc:  # nothing was started: say why, as a result (as a worker's call does)
                unstarted = nothing_started(self.spec.task_id, self.execution_id, exc)
                if not unstarted.data.get("run_ended"):
                    return unstarted
                return await record_refusal(  # its run was cancelled meanwhile: a refusal, on record
                    self.store, unstarted, caller=self.caller, params=self.admitted.clean, detach=False,
                    where=self.where,
                )  # fmt: skip
            if known is not None:
                return await self.attach(known)
        held = f"inline.after_claim.{self.spec.task_id}"  # a test holds a claimed call here
        if faults.armed(held):
            await off_loop(faults.point, held)
        paths = ExecutionPaths.of(self.home, self.execution_id)
        ctx = WorkerContext(
            execution_id=self.execution_id,
            task_id=self.spec.task_id,
            home=self.home,
            params=self.admitted.params,
            paths=paths,
            log=logging.getLogger(f"tether.task.{self.spec.task_id}"),
        )
        self.jobs.register_inline(self.execution_id, ctx)
        try:
            with to_log(paths):  # what it prints is its log, not its caller's output
                status, message, data = await self._call(ctx)
        finally:
            self.jobs.unregister_inline(self.execution_id)
        if status is TaskStatus.COMPLETED and ctx.stop_reason is not None and self.where.given:
            # It finished although a stop was asked: the record (a stop may have said so) and the
            # answer both say completed.
            data = {**data, "stop_came_late": ctx.stop_reason}
        result = bounded(
            TaskResult(
                task_id=self.spec.task_id,
                execution_id=self.execution_id,
                status=status,
                message=message,
                duration_seconds=round(time.monotonic() - self.started, 6),
                data={**data, **inline},
            )
        )
        settled = await self._settle(result)
        faults.point("inline.after_end")  # a crash here: the outcome, and a journal's writes, are on record
        return settled

    async def _claim(self) -> JobRecord | None:
        """Put a caller-chosen id on record as running in this process, before the handler runs: a stop
        from anywhere finds it, and a process that dies with it leaves a record that says so (the
        ``JobManager``'s inline handling). The twin's record when another call claimed the id first."""
        held = f"inline.before_claim.{self.spec.task_id}"  # a test holds one call of a wave here
        if faults.armed(held):
            await off_loop(faults.point, held)
        running, starter = claim_of(self.spec, self.execution_id)
        inserted = await off_loop(
            self.store.insert,
            running,
            caller=self.caller,
            params=self.admitted.clean,
            if_absent=True,
            starter=starter,
            also=None if self.journal is None else self.journal.started,
            **self.where.record,
        )
        if inserted:
            return None
        known = await off_loop(self.store.get, self.execution_id)
        assert known is not None
        return known

    async def _call(self, ctx: WorkerContext) -> Outcome:
        """Run the handler under the task's timeout; every way it can end, as (status, message, data)."""
        spec = self.spec
        if ctx.should_stop():  # asked between its claim and now (a cancel that found it): it never begins
            reason = ctx.stop_reason or "stop"
            return TaskStatus.STOPPED, f"stopped before it started ({reason})", {"stop_reason": reason}
        try:
            handler = load_object(spec.handler)
            if is_function_task(handler):  # ``@registry.task``: its parameters by name
                handler = functools.partial(invoke, handler)
            if inspect.iscoroutinefunction(handler):
                value = await asyncio.wait_for(handler(ctx), spec.timeout_s)
            else:
                value = await asyncio.wait_for(asyncio.to_thread(handler, ctx), spec.timeout_s)
                if inspect.isawaitable(value):
                    value = await asyncio.wait_for(value, spec.timeout_s)
            message, data = outcome(value)
            return TaskStatus.COMPLETED, message, data
        except TaskFailed as exc:
            return TaskStatus.FAILED, exc.message, exc.data
        except StopRequested as exc:
            return TaskStatus.STOPPED, exc.message, exc.data
        except TimeoutError:
            ctx.request_stop(TIMEOUT)  # a handler that polls should_stop() ends soon after
            return TaskStatus.FAILED, f"timed out after {spec.timeout_s:g}s", {"stop_reason": TIMEOUT}
        except asyncio.CancelledError:
            ctx.request_stop("cancelled")
            raise
        except Exception as exc:
            log.exception("inline handler %s raised", spec.handler)
            return TaskStatus.FAILED, f"{type(exc).__name__}: {exc}", {}

    async def _settle(self, result: TaskResult) -> TaskResult:
        """The terminal state on record; a record that ended otherwise first wins."""
        try:
            if self.where.given:
                journal = self.journal
                ended, then = (None, None) if journal is None else (journal.ended, journal.then)
                recorded = await off_loop(
                    functools.partial(self.store.transition, result, also=ended, then=then)
                )
                if recorded.status is not result.status:
                    return recorded.to_result()
            else:
                await off_loop(
                    self.store.insert,
                    result,
                    caller=self.caller,
                    params=self.admitted.clean,
                    **self.where.record,
                )
        except StoreError as exc:  # the handler ran: its result is still the answer
            log.warning("could not record %s: %s", self.execution_id, exc.message)
            return result.with_data(not_on_record=exc.message)
        return result
