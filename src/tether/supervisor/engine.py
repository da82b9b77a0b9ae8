"""The engine: a run is a chain of DBOS workflow segments that drive its plan to the end.

A segment (workflow id ``<run>.<n>``) begins, for a goal's run with no tasks yet, with the ``plan``
step; then it loops: one ``decide`` step reads what changed in the run, applies ``policies.schedule``
(skips, review requests, the end), records the next wave's attempts as started and returns the wave; the
wave's tasks run in parallel — a call is one ``attempt`` step, an agent's task a child workflow
(``agent_attempt``) whose model calls and tool executions are steps of their own. Decisions are
checkpointed by DBOS, so a segment replayed after a crash takes the same path; an attempt that was in
flight is executed again under the **same execution id** (derived from run, task and attempt), which the
executor resolves: the published result is adopted, a live worker is re-attached, a worker that died
mid-run is an explicit ``unknown`` that the task's failure policy settles. Nothing runs twice silently.

A segment ends when the run is over, when a person must answer (the pending review is in the store;
no worker, lock, thread or parked workflow is held), or when a retry is due later (the next segment is
enqueued with a durable delay). A person's answer enqueues the next segment, deduplicated by its
workflow id, from any process — an executor need not be running.

Only executor processes import this module (it registers the workflows with DBOS).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from dbos import DBOS, SetWorkflowID

from tether.execution.admission import execution_id_for
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths
from tether.runtime import Runtime
from tether.store.runs import RunRecord, TaskState
from tether.supervisor import durable, turns
from tether.supervisor.plan import Plan, Profile, Task
from tether.supervisor.policies import (
    FAILED,
    Move,
    after_attempt,
    as_text_where_text,
    busy,
    call_args,
    context_of,
    executor_of,
    schedule,
)
from tether.tasks.confirm import Confirmation
from tether.tasks.result import TaskResult, TaskStatus

log = logging.getLogger("tether.supervisor")

WORKFLOW = durable.WORKFLOW
segment_id = durable.segment_id


@dataclass
class Host:
    """What this executor process runs attempts with."""

    runtime: Runtime
    executor: Executor
    model_for: Callable[[str | None], Any] | None = None
    slot: durable.Slot | None = None
    watch: asyncio.Task[None] | None = None  # the look for dead executors' slots


_HOST: Host | None = None


class NotAnExecutor(RuntimeError):
    """A workflow ran in a process that is not (or no longer) a launched tether executor: the work is
    recovered by an executor, never given up."""


def host() -> Host:
    if _HOST is None:
        raise NotAnExecutor("this process is not a tether executor (engine.launch was not called)")
    return _HOST


async def _io(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, *args, **kwargs)


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


# -- the workflow -----------------------------------------------------------------------------------


@DBOS.workflow(name=WORKFLOW)
async def run_segment(run_id: str, segment: int) -> str:
    try:
        if (await plan_run(run_id))["end"]:  # a goal's run with no tasks yet: plan it first
            return "failed"
        while True:
            decision = await decide(run_id, segment)
            if decision["end"] == "later":
                await continue_later(run_id, segment, decision["delay_s"])
                return "later"
            if decision["end"]:
                return str(decision["end"])
            await asyncio.gather(*(_attempt_of(run_id, item) for item in decision["run"]))
    except Exception as exc:  # a bug or a broken store: the run must not stay "running"
        if type(exc).__name__ in ("DBOSWorkflowCancelledError", "DBOSAwaitedWorkflowCancelledError"):
            raise
        if (
            _HOST is None
            or isinstance(exc, NotAnExecutor)
            or (isinstance(exc, RuntimeError) and "after shutdown" in str(exc))
        ):
            raise  # this executor is starting or shutting down: the segment is recovered, never given up
        await give_up(run_id, f"{type(exc).__name__}: {exc}"[:1000])
        raise


async def _attempt_of(run_id: str, item: list[Any]) -> dict[str, Any]:
    """One attempt of the wave: a step for a call, a child workflow (its id the attempt's execution id)
    for an agent. Either is one operation of the segment, started in the wave's order, so a replayed
    segment meets its recorded operations in the same order."""
    task_id, number = str(item[0]), int(item[1])
    if len(item) > 2 and item[2] == "agent":
        with SetWorkflowID(execution_id_for("run", run_id, task_id, str(number))):
            return await agent_attempt(run_id, task_id, number)
    return await attempt(run_id, task_id, number)


@DBOS.step(name="tether.decide", retries_allowed=False)
async def decide(run_id: str, segment: int) -> dict[str, Any]:
    h = host()
    store = h.runtime.runs
    run: RunRecord | None = await _io(_read_for_decide, h, run_id)
    if run is None:
        return {"end": "missing", "run": []}
    if run.segment != segment:
        return {"end": "superseded", "run": []}
    if run.status in ("completed", "failed", "cancelled"):
        return {"end": run.status, "run": []}
    known = await _io(_plan_of, h, run)
    plan, resources = known.plan, known.resources
    claimed = sorted({r for rs in resources.values() for r in rs})
    heads = await _io(store.first_waiters, claimed) if claimed else {}
    decision = schedule(
        plan, run, now=time.time(), started=_epoch(run.created_at), resources=resources, first_waiters=heads
    )
    for move in decision.moves:
        await _io(_apply, store, run_id, move)
    if decision.moves:
        return {"end": None, "run": []}  # decide again on the new state
    if decision.run:  # the wave's attempts start on record together: one write for the wave
        states = {t.task_id: t for t in run.tasks}
        wave = [
            (t, n, execution_id_for("run", run_id, t, str(n)), _how(known.tasks[t], states[t], plan.caller))
            for t, n in decision.run
        ]
        await _io(store.begin_attempts, run_id, wave)
    if decision.end in ("completed", "failed"):
        await _io(store.set_status, run_id, decision.end, decision.message)
    elif decision.end == "waiting_for_human":
        await _io(store.set_status, run_id, "waiting_for_human", decision.message, only_from=("running",))
    return {
        "end": decision.end,
        "run": [[t, n, "call" if known.tasks[t].call is not None else "agent"] for t, n in decision.run],
        "delay_s": decision.delay_s,
    }


@DBOS.step(name="tether.plan", retries_allowed=False)
async def plan_run(run_id: str) -> dict[str, Any]:
    """A goal's run starts with no tasks: its planner (the model's call, or the offline planner) makes
    them here, in a step of its own, so a replay never asks the model again."""
    from tether.errors import ModelError, PlanError
    from tether.supervisor.planner import plan_goal

    h = host()
    head = await _io(h.runtime.runs.view, run_id, task_ids=[])
    if head is None or head.status != "running":
        return {"end": None}  # the decision says what becomes of it
    document, _ = await _io(h.runtime.runs.plan, run_id)
    if document.get("tasks"):
        return {"end": None}
    goal, caller = str(document.get("goal", "")), str(document.get("caller") or "agent")
    why = "this executor has no model configured to plan goals"
    if h.model_for is not None:
        try:
            plan, note = await plan_goal(
                goal, h.executor.registry, h.model_for(None), caller=caller, home=h.runtime.home
            )
        except PlanError as exc:
            why = f"the goal cannot be planned: {exc.message}"
        except ModelError as exc:
            why = f"the model service failed while planning: {exc.message}"
        else:
            done = plan.model_dump(mode="json", exclude_defaults=True)
            ids = [t.id for t in plan.tasks]
            await _io(h.runtime.runs.add_tasks, run_id, done, ids, why=note or "planned")
            return {"end": None}
    await _io(h.runtime.runs.set_status, run_id, "failed", why[:2000])
    return {"end": "failed"}


@DBOS.step(name="tether.continue_later", retries_allowed=False)
async def continue_later(run_id: str, segment: int, delay_s: float) -> None:
    h = host()
    following = await _io(h.runtime.runs.next_segment, run_id, expect=segment) or segment + 1
    await _io(durable.enqueue_segment, h.runtime, run_id, following, delay_s)


@DBOS.step(name="tether.give_up", retries_allowed=False)
async def give_up(run_id: str, message: str) -> None:
    await _io(host().runtime.runs.set_status, run_id, "failed", f"the engine failed: {message}")


@dataclass(frozen=True)
class _Known:
    """A run's plan, parsed once per version, with what the engine looks up in it per step."""

    plan: Plan
    tasks: dict[str, Task]
    needs: dict[str, list[str]]  # a task → the tasks whose state its policy reads (itself, inputs, loop)
    resources: dict[str, tuple[str, ...]]


_PLANS: dict[str, tuple[int, _Known]] = {}


def _plan_of(h: Host, run: RunRecord) -> _Known:
    cached = _PLANS.get(run.run_id)
    if cached is not None and cached[0] == run.plan_version:
        return cached[1]
    document, version = h.runtime.runs.plan(run.run_id)
    plan = Plan.model_validate(document)
    producers: dict[str, list[str]] = {}
    for task in plan.tasks:
        for key in task.outputs:
            producers.setdefault(key, []).append(task.id)
    needs = {}
    for task in plan.tasks:
        wanted = {task.id, *(p for key in task.inputs for p in producers.get(key, ()))}
        if task.loop is not None:
            wanted.add(task.loop.until.task)
        needs[task.id] = sorted(wanted)
    known = _Known(plan, {t.id: t for t in plan.tasks}, needs, _resources(h, plan))
    if len(_PLANS) > 256:
        _PLANS.clear()
    _PLANS[run.run_id] = (version, known)
    return known


def _resources(h: Host, plan: Plan) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for task in plan.tasks:
        if task.call is not None and task.call.task not in out:
            spec = h.executor.registry.get(task.call.task, plan.caller)
            out[task.call.task] = spec.resources if spec is not None else ()
    return out


def _apply(store: Any, run_id: str, move: Move) -> None:
    store.update_task(run_id, move.task_id, **move.fields())
    _queue(store, run_id, move)


def _queue(store: Any, run_id: str, move: Move) -> None:
    """Keep the resource queue with a move: a task that waits for a resource is in it (from when it first
    asked), any other move takes it out."""
    stage = (move.overrides or {}).get("stage") or {}
    if move.status == "pending" and stage.get("waiting_for"):
        store.wait_for(stage["waiting_for"], run_id, move.task_id, float(stage.get("waiting_since") or 0))
    else:
        store.done_waiting(run_id, move.task_id)


# -- one attempt ------------------------------------------------------------------------------------


@DBOS.step(name="tether.attempt", retries_allowed=False)
async def attempt(run_id: str, task_id: str, number: int) -> dict[str, Any]:
    """One attempt of a task that calls a registry task: one step, one execution."""
    h = host()
    at = await _io(_open_attempt, h, run_id, task_id, number)
    if isinstance(at, dict):
        return at
    started = time.monotonic()
    outcome, message, data = await _perform(
        h, at.known.plan, at.run, at.task, at.state, at.execution_id, number
    )
    return await _finish(
        h, at.known, at.run, task_id, number, outcome, message, data, time.monotonic() - started
    )


@DBOS.workflow(name="tether.agent_attempt")
async def agent_attempt(run_id: str, task_id: str, number: int) -> dict[str, Any]:
    """One attempt of a task for an executor profile: a conversation turn of its own, whose model calls
    and tool executions are steps of this workflow (``supervisor/turns.py``). A crash mid-turn resumes
    the turn from its last finished step: no model call is asked twice, no tool runs twice."""
    opened = await open_agent(run_id, task_id, number)
    if "outcome" in opened:  # refused before any turn (no model): settled like any outcome
        return await finish_agent(run_id, task_id, number, opened["started"], opened["outcome"])
    if "ask" not in opened:
        return opened  # nothing to run: its outcome is on record, or the run was cancelled
    outcome = await turns.agent_turn(host(), opened)
    return await finish_agent(run_id, task_id, number, opened["started"], outcome)


@DBOS.step(name="tether.open_agent", retries_allowed=False)
async def open_agent(run_id: str, task_id: str, number: int) -> dict[str, Any]:
    h = host()
    at = await _io(_open_attempt, h, run_id, task_id, number)
    if isinstance(at, dict):
        return at
    plan, run, task, state = at.known.plan, at.run, at.task, at.state
    name = executor_of(task, state, plan.caller)
    profile = plan.profiles.get(name) or Profile(caller=name)
    if h.model_for is None:
        return {"outcome": ["rejected", "this executor has no model configured for agent tasks", {}],
                "started": time.time()}  # fmt: skip
    description = state.overrides.get("description", task.description)
    context = context_of(plan, run)
    given = {k: context[k] for k in task.inputs if k in context}
    message = description if not given else f"{description}\n\n{json.dumps(given, ensure_ascii=False)[:8000]}"
    return {
        "ask": message,
        "thread_id": f"run-{at.execution_id}",
        "caller": profile.caller,
        "model": profile.model,
        "deadline": _deadline(plan, run, task),
        "started": time.time(),
    }


@DBOS.step(name="tether.finish_agent", retries_allowed=False)
async def finish_agent(
    run_id: str, task_id: str, number: int, started: float, outcome: list[Any]
) -> dict[str, Any]:
    h = host()
    known, run = await _io(_read_for_attempt, h, run_id, task_id)
    status, message, data = outcome
    return await _finish(h, known, run, task_id, number, status, message, data, time.time() - started)


async def _finish(
    h: Host,
    known: _Known,
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
        fresh = await _io(
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
        spec = h.executor.registry.get(task.call.task, plan.caller)
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
        note = await _io(_accept_proposals, h, run_id, plan, task_id, data["propose"])
        if note:
            move = replace(move, diagnostics={**(move.diagnostics or {}), "proposals": note})
    await _io(
        store.settle,
        run_id,
        task_id,
        number,
        outcome=outcome,
        message=message,
        duration_s=duration,
        task=move.fields(),
    )
    await _io(_queue, store, run_id, move)
    return {"status": outcome, "next": move.status}


@dataclass(frozen=True)
class _Opened:
    """An attempt about to run: the plan, the run narrowed to what its policy reads, its task."""

    known: _Known
    run: RunRecord
    task: Task
    state: TaskState
    execution_id: str


def _open_attempt(h: Host, run_id: str, task_id: str, number: int) -> dict[str, Any] | _Opened:
    """Read what attempt ``number`` needs (its decision recorded it as started), in one trip to a thread;
    a dict when there is nothing to run (its outcome is on record already, or the run was cancelled)."""
    known, run = _read_for_attempt(h, run_id, task_id)
    state = run.task(task_id)
    assert state is not None
    if state.attempts > number or (state.attempts == number and state.status != "running"):
        return {"status": state.status, "settled": True}  # this attempt's outcome is on record
    if run.status == "cancelled":
        return {"status": "cancelled"}
    return _Opened(
        known, run, known.tasks[task_id], state, execution_id_for("run", run_id, task_id, str(number))
    )


_SEEN: dict[str, tuple[int, dict[str, TaskState]]] = {}


def _read_for_decide(h: Host, run_id: str) -> RunRecord | None:
    """The run for ``decide``, every task in full: this process keeps the tasks it saw and reads only
    those changed since (by the run's revision), so a decision costs the same at task 1 and task 1,000."""
    seen = _SEEN.get(run_id)
    got = h.runtime.runs.changes(run_id, seen[0] if seen else -1)
    if got is None:
        _SEEN.pop(run_id, None)
        return None
    head, changed = got
    tasks = dict(seen[1]) if seen else {}  # a copy: a superseded segment may decide at the same time
    for state in changed:
        tasks[state.task_id] = state
    if head.terminal:
        _SEEN.pop(run_id, None)
    else:
        if len(_SEEN) > 256 and run_id not in _SEEN:
            _SEEN.clear()
        _SEEN[run_id] = (head.rev, tasks)
    return replace(head, tasks=tuple(sorted(tasks.values(), key=lambda t: t.position)))


def _read_for_attempt(h: Host, run_id: str, task_id: str) -> tuple[_Known, RunRecord]:
    """The plan (cached per version) and the run narrowed to the tasks this task's policy reads (its
    attempts are read by ``_finish`` only when it failed): one read when the plan is known already."""
    cached = _PLANS.get(run_id)
    if cached is not None and task_id in cached[1].needs:
        run = h.runtime.runs.view(run_id, task_ids=cached[1].needs[task_id])
        if run is not None and run.plan_version == cached[0]:
            return cached[1], run
    head = h.runtime.runs.view(run_id, task_ids=[task_id])
    assert head is not None
    known = _plan_of(h, head)
    run = h.runtime.runs.view(run_id, task_ids=known.needs[task_id])
    assert run is not None
    return known, run


def _how(task: Task, state: TaskState, caller: str) -> dict[str, Any]:
    if task.call is not None:
        how = {
            "call": task.call.task,
            "args": state.overrides.get("args", task.call.args),
            "executor": caller,
        }
        if task.call.args_from and "args" not in state.overrides:
            how["args_from"] = task.call.args_from
        return how
    return {
        "executor": executor_of(task, state, caller),
        "description": state.overrides.get("description", task.description)[:500],
    }


async def _perform(
    h: Host, plan: Plan, run: RunRecord, task: Task, state: TaskState, execution_id: str, number: int
) -> tuple[str, str, dict[str, Any]]:
    """Run one attempt through the executor; (outcome, message, data). Outcome ``unknown`` when its
    worker died mid-run (it may or may not have taken effect), ``not_started`` when the process that
    started it died before its worker began (it provably never ran)."""
    deadline = _deadline(plan, run, task)
    assert task.call is not None  # an agent's attempt is a workflow of its own: agent_attempt
    origin = f"run:{run.run_id}"
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
    job = asyncio.ensure_future(
        h.executor.execute(
            task.call.task,
            args,
            caller=plan.caller,
            origin=origin,
            step_id=f"{run.run_id}/{task.id}/{number}",
            execution_id=execution_id,
            detach=True,
            confirmation=confirmation,
        )
    )
    watch = _Watch(h, execution_id, plan.caller, origin, deadline, task.heartbeat_s)
    result = await watch.follow(job)
    if result.status is TaskStatus.RUNNING:  # a background task: follow it to its end
        wait = asyncio.ensure_future(
            h.executor.control(execution_id, "wait", caller=plan.caller, origin=origin)
        )
        result = await watch.follow(wait)
    return _classify(result)


@dataclass
class _Watch:
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


def _deadline(plan: Plan, run: RunRecord, task: Task) -> float | None:
    ends = []
    if task.timeout_s is not None:
        ends.append(time.time() + task.timeout_s)
    if plan.timeout_s is not None:
        ends.append(_epoch(run.created_at) + plan.timeout_s)
    return min(ends) if ends else None


def _classify(result: TaskResult) -> tuple[str, str, dict[str, Any]]:
    data = dict(result.data or {})
    status = result.status.value
    if result.status is TaskStatus.FAILED and data.get("interrupted"):
        status = "unknown"
    elif result.status in (TaskStatus.FAILED, TaskStatus.STOPPED) and data.get("never_started"):
        status = "not_started"  # its claim was abandoned: it provably never ran and never will
    return status, result.message, data


def _accept_proposals(h: Host, run_id: str, plan: Plan, parent: str, proposals: list[Any]) -> str:
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


# -- launching an executor ----------------------------------------------------------------------------


async def launch(
    runtime: Runtime, executor: Executor, *, model_for: Callable[[str | None], Any] | None = None
) -> Host:
    """Make this process a tether executor: hold a slot, launch DBOS in the running loop, recover what
    dead executors left. Call ``shutdown`` before the loop ends."""
    global _HOST
    own = durable.names(runtime.installation.id)
    await _io(durable.prepare, durable.system_url(runtime), own)  # database round trips: not on the loop
    slot = await _io(durable.take_slot, runtime.home)
    # The host is in place before DBOS launches: its queue and its own recovery may start a segment at
    # once, and a segment that found no host failed its run ("not a tether executor") under load.
    _HOST = Host(runtime=runtime, executor=executor, model_for=model_for, slot=slot)
    try:
        DBOS(config=durable.config(runtime, slot))  # type: ignore[arg-type]
        DBOS.launch()
        await _io(durable.recover_free_slots, runtime.home, slot)
    except BaseException:
        _HOST = None
        slot.close()
        raise
    await _io(reconcile_runs, runtime)
    await _io(durable.prune, runtime)
    _HOST.watch = asyncio.get_running_loop().create_task(_watch_slots(runtime, slot))
    return _HOST


# How often a live executor looks for the slots of executors that died after it launched: what they held
# is handed back to the queue within this long (a launch only recovered the slots dead at that moment).
WATCH_SLOTS_S = 2.0


async def _watch_slots(runtime: Runtime, slot: durable.Slot) -> None:
    while True:
        await asyncio.sleep(WATCH_SLOTS_S)
        try:
            recovered = await _io(durable.recover_free_slots, runtime.home, slot)
        except Exception:  # a store or DBOS hiccup: the next look may do better
            log.warning("looking for dead executors' work failed", exc_info=True)
            continue
        if recovered:
            log.warning("took over %d workflow(s) of executors of %s that died", recovered, runtime.home)


async def held_here() -> list[str]:
    """The workflows this executor has dequeued and not finished (other runs' segments and turns as
    well as its own): ``shutdown`` abandons them, so whoever leaves early hands them on first."""
    if _HOST is None or _HOST.slot is None:
        return []
    found = await DBOS.list_workflows_async(
        status="PENDING", executor_id=_HOST.slot.executor_id, load_input=False, load_output=False
    )
    return [w.workflow_id for w in found]


def shutdown() -> None:
    global _HOST
    if _HOST is not None and _HOST.watch is not None:
        _HOST.watch.cancel()
    DBOS.destroy(workflow_completion_timeout_sec=0)
    if _HOST is not None and _HOST.slot is not None:
        _HOST.slot.close()
    _HOST = None


def reconcile_runs(runtime: Runtime) -> int:
    """This home's runs that are ``running`` with no live segment (a crash between recording a run, or a
    person's answer, and enqueuing what goes on; a segment DBOS gave up on) get their next segment.
    Another home's run is never continued here: its segments are in its own application, out of sight
    of this one, and its work belongs to its own executors."""
    count = 0
    for run in runtime.runs.active():
        if run.status != "running":
            continue
        if durable.segment_status(runtime, run.run_id, run.segment) in durable.NO_LIVE_SEGMENT:
            durable.continue_run(runtime, run.run_id, run.segment)
            count += 1
    return count
