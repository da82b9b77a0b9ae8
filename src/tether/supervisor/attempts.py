"""One attempt of a task that calls a registry task: called through the executor under the run's
caller (with the person's consent when a review before it was answered), followed to its end (stopped at
its deadline, or when silent past its heartbeat), classified (``unknown``: its worker died mid-run;
``not_started``: it provably never ran) and settled as its failure policy says."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Any

from tether.execution.inline import Claim, Journal
from tether.execution.protocol import ExecutionPaths
from tether.store.jobs import JobRecord
from tether.store.runs import RunRecord, TaskState, Written
from tether.supervisor.eager import Ahead, Ended, next_in
from tether.supervisor.host import Host, epoch, io
from tether.supervisor.plan import Plan, Task
from tether.supervisor.policies import (
    FAILED,
    after_attempt,
    as_text_where_text,
    busy,
    call_args,
    context_of,
    executor_of,
)
from tether.supervisor.reading import Known, Opened, waiting_of
from tether.tasks.confirm import Confirmation
from tether.tasks.result import TaskResult, TaskStatus


async def finish(
    h: Host,
    known: Known,
    run: RunRecord,
    task_id: str,
    number: int,
    outcome: str,
    message: str,
    data: dict[str, Any],
    duration: float,
) -> dict[str, Any]:
    """Settle an attempt: its outcome on record and the task moved as its failure policy says."""
    store = h.runtime.runs
    run_id = run.run_id
    if busy(outcome, data):  # a resource another job holds: the task waits its turn (not a failure)
        outcome = "busy"
    plan = known.plan
    task = known.tasks[task_id]
    state = run.task(task_id)
    assert state is not None
    executor_failures = 0
    if outcome != "completed":  # the failure chain counts earlier failures: read them fresh
        fresh = await io(
            store.view, run_id, task_ids=known.needs[task_id], attempts_of=task_id, failed_attempts=True
        )
        assert fresh is not None
        run = fresh
        who = executor_of(task, state, plan.caller)
        executor_failures = 1 + sum(
            1 for a in run.attempts if a.status in FAILED and (a.how.get("executor") or plan.caller) == who
        )
    state = replace(state, attempts=number)
    idempotent = False
    if task.call is not None:
        spec = h.executor.registry.get(task.call.task, plan.caller, plan.grants_of())
        idempotent = bool(spec and spec.idempotent)
    move = after_attempt(
        task,
        state,
        outcome=outcome,
        message=message,
        data=data,
        idempotent=idempotent,
        now=time.time(),
        executor_failures=executor_failures,
        context=context_of(plan, run),
        run=run,
    )
    if outcome == "completed" and isinstance(data.get("propose"), list):
        note = await io(accept_proposals, h, run_id, plan, task_id, data["propose"])
        if note:
            move = replace(move, diagnostics={**(move.diagnostics or {}), "proposals": note})
    await io(
        store.settle,
        run_id,
        task_id,
        number,
        outcome=outcome,
        message=message,
        duration_s=duration,
        task=move.fields(),
        waiting=waiting_of(move),  # the queue moves with the task, in the same transaction
    )
    return {"status": outcome, "next": move.status}


@dataclass
class _Written:
    """What an inline attempt's journal wrote in its job's own transactions."""

    began: bool = False
    claimed_at: int | None = None  # the run's revision its claim took, when no one else wrote before it
    settled: dict[str, Any] | None = None
    written: Written | None = None  # what its settle wrote, read back
    ahead: Ahead | Ended | None = None  # the next attempt claimed with this one's end, or the run's end


async def inline_attempt(
    h: Host, opened: Opened, number: int, how: dict[str, Any], ahead: Ahead | None = None, alone: bool = False
) -> dict[str, Any]:
    """An attempt of an inline call that its decision opened (``engine.advance``), run without a step of
    its own: the attempt goes on record in the transaction that claims its job, before the handler runs,
    and a completed one settles in the transaction that ends its job, which may claim the next
    (``eager.py``: under ``"ahead"`` in the answer, for ``advance`` to run next; ``ahead``: this attempt
    was claimed so; ``alone``: no other attempt of its wave runs beside it, the only case in which the
    run it holds can be the run on record). Any other outcome (a refusal, a failure, a twin's run
    adopted) is settled as ``finish`` settles every attempt."""
    runs, run, task = h.runtime.runs, opened.run, opened.task
    plan, started = opened.known.plan, time.monotonic()
    wrote = _Written(began=ahead is not None, claimed_at=None if ahead is None else ahead.rev)

    def began(conn: Any) -> None:
        written = runs.begin_in(conn, run.run_id, [(task.id, number, opened.execution_id, how)])
        wrote.began = True
        if alone and written is not None and written.rev == run.rev + 1:
            wrote.claimed_at = written.rev

    def ended(conn: Any, record: JobRecord) -> None:
        try:
            outcome, message, data = classify(record.to_result())
            if not wrote.began or outcome != "completed" or isinstance(data.get("propose"), list):
                return  # settled by ``finish``, after
            move = after_attempt(
                task, opened.state, outcome=outcome, message=message, data=data, idempotent=False,
                now=time.time(), executor_failures=0, context=context_of(plan, run), run=run,
            )  # fmt: skip
            fields, waiting = move.fields(), waiting_of(move)
        except Exception:  # not the job's end to undo: ``finish`` meets it again, and the run says what
            return
        wrote.written = runs.settle_in(
            conn, run.run_id, task.id, number, outcome=outcome, message=message,
            duration_s=time.monotonic() - started, task=fields, waiting=waiting,
            queued=False,  # an inline task claims no resource, so it never waits in a resource's queue
        )  # fmt: skip
        wrote.settled = {"status": outcome, "next": move.status}  # once it commits: see below

    def then(conn: Any) -> None:  # after its job's end and event: the next call, claimed ahead
        if wrote.written is not None:
            wrote.ahead = next_in(h, conn, opened, wrote.claimed_at, wrote.written)

    try:
        outcome, message, data = await perform(
            h, plan, run, task, opened.state, opened.execution_id, number, Journal(began, ended, then),
            None if ahead is None else ahead.claim,
        )  # fmt: skip
    except BaseException:  # cancelled, or a bug: a call claimed ahead will not run, and must not hang
        if isinstance(wrote.ahead, Ahead):
            await io(h.executor.give_up, wrote.ahead.claim)
        raise
    if wrote.settled is not None and "not_on_record" not in data:
        return {**wrote.settled, "ahead": wrote.ahead} if wrote.ahead is not None else wrote.settled
    # Its end did not commit (the store failed at the end): neither did the settle written with it.
    if not wrote.began:  # refused before its claim, or a twin's: the attempt goes on record now
        await io(runs.begin_attempts, run.run_id, [(task.id, number, opened.execution_id, how)])
    return await finish(
        h, opened.known, run, task.id, number, outcome, message, data, time.monotonic() - started
    )


async def perform(
    h: Host,
    plan: Plan,
    run: RunRecord,
    task: Task,
    state: TaskState,
    execution_id: str,
    number: int,
    journal: Journal | None = None,
    claim: Claim | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """Run one attempt through the executor (``claim``: an inline call it claimed ahead, run as
    claimed); (outcome, message, data). Outcome ``unknown`` when its worker died mid-run (it may or may
    not have taken effect), ``not_started`` when the process that started it died before its worker
    began (it provably never ran)."""
    deadline = deadline_of(plan, run, task)
    assert task.call is not None  # an agent's attempt is a workflow of its own: agent_attempt
    origin = f"run:{run.run_id}"
    if claim is not None and journal is not None:
        job = asyncio.ensure_future(h.executor.run_claimed(claim, journal))
    else:
        args, confirmation = _call_of(h, plan, run, task, state)
        job = asyncio.ensure_future(
            h.executor.execute(
                task.call.task,
                args,
                caller=plan.caller,
                grants=plan.grants_of(),
                origin=origin,
                step_id=f"{run.run_id}/{task.id}/{number}",
                execution_id=execution_id,
                detach=True,
                confirmation=confirmation,
                journal=journal,
            )
        )
    watch = Watch(h, execution_id, plan.caller, origin, deadline, task.heartbeat_s)
    result = await watch.follow(job)
    if result.status is TaskStatus.RUNNING:  # a background task: follow it to its end
        wait = asyncio.ensure_future(
            h.executor.control(
                execution_id, "wait", caller=plan.caller, origin=origin, grants=plan.grants_of()
            )
        )
        result = await watch.follow(wait)
    return classify(result)


def _call_of(
    h: Host, plan: Plan, run: RunRecord, task: Task, state: TaskState
) -> tuple[dict[str, Any], Confirmation | None]:
    """The arguments of a task's call, and the person's consent when a review before it was answered."""
    assert task.call is not None
    args, _ = call_args(task, state, context_of(plan, run))
    args = as_text_where_text(h.executor.registry.get(task.call.task), args)
    review = state.review or {}
    confirmation = None
    if (
        review.get("kind") == "before"
        and review.get("answer") in ("approve", "edit")
        and review.get("digest")
    ):
        confirmation = Confirmation(
            task_id=task.call.task,
            digest=review["digest"],
            source=f"person:review:{review.get('by', 'cli')}",
            nonce=review["nonce"],
        )
    return args, confirmation


@dataclass
class Watch:
    """Follows one execution to its end, stopping it at its deadline, or when it has been silent (no
    progress event from its worker) for ``heartbeat_s``: a stuck task is declared stuck, not awaited."""

    h: Host
    execution_id: str
    caller: str
    origin: str
    deadline: float | None
    heartbeat_s: float | None

    async def follow(self, job: asyncio.Future[TaskResult]) -> TaskResult:
        if self.deadline is None and self.heartbeat_s is None:
            return await job
        events = ExecutionPaths.of(self.h.runtime.home, self.execution_id).events
        began = time.time()
        while True:
            wait_s = 0.5 if self.heartbeat_s is not None else None
            if self.deadline is not None:
                left = max(0.0, self.deadline - time.time())
                wait_s = left if wait_s is None else min(wait_s, left)
            done, _ = await asyncio.wait({job}, timeout=wait_s)
            if done:
                return job.result()
            why = None
            if self.deadline is not None and time.time() >= self.deadline:
                why = "timed out"
            elif self.heartbeat_s is not None:
                try:
                    last = max(began, events.stat().st_mtime)
                except OSError:
                    last = began
                if time.time() - last > self.heartbeat_s:
                    why = f"stuck: no progress for {self.heartbeat_s:g} s"
            if why is None:
                continue
            await self.h.executor.control(
                self.execution_id, "stop", caller=self.caller, origin=self.origin, reason=why
            )
            result = await job
            if result.status is TaskStatus.STOPPED:
                return result.model_copy(update={"message": f"{why}; {result.message}"})
            return result


def deadline_of(plan: Plan, run: RunRecord, task: Task) -> float | None:
    ends = []
    if task.timeout_s is not None:
        ends.append(time.time() + task.timeout_s)
    if plan.timeout_s is not None:
        ends.append(epoch(run.created_at) + plan.timeout_s)
    return min(ends) if ends else None


def classify(result: TaskResult) -> tuple[str, str, dict[str, Any]]:
    data = dict(result.data or {})
    status = result.status.value
    if result.status is TaskStatus.FAILED and data.get("interrupted"):
        status = "unknown"
    elif result.status in (TaskStatus.FAILED, TaskStatus.STOPPED) and data.get("never_started"):
        status = "not_started"  # its claim was abandoned: it provably never ran and never will
    return status, result.message, data


def accept_proposals(h: Host, run_id: str, plan: Plan, parent: str, proposals: list[Any]) -> str:
    """Follow-up tasks an executor proposed: added after validation and a cycle check; the note says
    what was accepted or why not."""
    from tether.errors import PlanError
    from tether.supervisor.validate import check

    tasks = []
    for raw in proposals[:20]:
        if isinstance(raw, dict):
            raw = {"depends_on": [parent], **raw}
        tasks.append(raw)
    try:
        document = plan.model_dump(mode="json", exclude_defaults=False)
        document["tasks"] = [*document["tasks"], *tasks]
        grown = Plan.model_validate(document)
        check(grown, h.executor.registry)
    except PlanError as exc:
        return f"proposal refused: {exc}"[:1000]
    except Exception as exc:  # pydantic's ValidationError: a malformed proposal
        return f"proposal refused: {str(exc).splitlines()[0]}"[:1000]
    new_ids = [t.id for t in grown.tasks[len(plan.tasks) :]]
    h.runtime.runs.add_tasks(run_id, grown.model_dump(mode="json", exclude_defaults=True), new_ids)
    return f"accepted: {', '.join(new_ids)}"
