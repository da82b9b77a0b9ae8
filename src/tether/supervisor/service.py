"""What any process may do to a run — start, answer, cancel, resume — without launching DBOS.

These are the short commands' side (``tether flow approve`` works while no executor runs): each writes
tether's store with a compare-and-set and, when the run must go on, enqueues its next workflow segment
through DBOS's client, deduplicated by the segment's workflow id. An executor process (``tether
worker``, ``tether serve``, or a ``tether flow run`` that found none) runs what is enqueued.

A run belongs to the home (installation) that started it: its segments are in that home's DBOS
application and its jobs in that home. Another home on the same database shows it, but does not answer,
resume or cancel it (``own``): it says where the run runs.
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

from tether.errors import ConfigError, PlanError, ToolRejected
from tether.execution import faults
from tether.runtime import Runtime
from tether.store.runs import RunRecord
from tether.store.threads import ThreadStore
from tether.supervisor import durable
from tether.supervisor.plan import Plan
from tether.supervisor.policies import as_text_where_text, call_args, context_of
from tether.supervisor.validate import check
from tether.tasks.confirm import call_digest
from tether.tasks.spec import Danger, Registry
from tether.tasks.validation import validate_params

Verb = Literal["approve", "reject", "edit"]


def new_run_id() -> str:
    return f"run-{secrets.token_hex(5)}"


def start(runtime: Runtime, registry: Registry, plan: Plan, *, run_id: str | None = None) -> RunRecord:
    """Record a run of ``plan`` (checked against ``registry`` first) and enqueue its first segment."""
    check(plan, registry)
    run_id = run_id or new_run_id()
    record = runtime.runs.create(
        run_id, goal=plan.goal, plan=plan.model_dump(mode="json", exclude_defaults=True), caller=plan.caller
    )
    durable.enqueue_segment(runtime, run_id, 0)
    return record


def start_goal(runtime: Runtime, goal: str, *, caller: str = "agent", run_id: str | None = None) -> RunRecord:
    """Record a run of ``goal`` whose plan its executor makes first, in the run's first step (the model
    call is checkpointed like every other), and enqueue it."""
    run_id = run_id or new_run_id()
    record = runtime.runs.create(
        run_id, goal=goal, plan={"goal": goal, "caller": caller, "tasks": []}, caller=caller
    )
    durable.enqueue_segment(runtime, run_id, 0)
    return record


async def begin_goal(
    runtime: Runtime, registry: Registry, goal: str, *, offline: bool, caller: str = "agent"
) -> RunRecord:
    """A run of ``goal``: the offline planner plans it here, at once (it asks no model); with a model,
    the run's executor plans it in the run's first step (``start_goal``)."""
    import asyncio

    if not offline:
        return await asyncio.to_thread(start_goal, runtime, goal, caller=caller)
    from tether.supervisor.goals import plan_offline

    plan = await asyncio.to_thread(
        plan_offline, goal, registry, caller=caller, home=runtime.home
    )  # off the loop
    return await asyncio.to_thread(start, runtime, registry, plan)


def find(runtime: Runtime, run_id: str) -> RunRecord:
    """A run by id or unique prefix; ``ConfigError`` naming the candidates otherwise."""
    if not isinstance(run_id, str) or not run_id or len(run_id) > 128:
        raise ConfigError("a run id is a short name such as run-1a2b3c4d5e")
    record = runtime.runs.get(run_id)
    if record is not None:
        return record
    found = runtime.runs.ids_with_prefix(run_id)
    if len(found) == 1:
        record = runtime.runs.get(found[0])
        assert record is not None
        return record
    if found:
        raise ConfigError(f"{run_id!r} starts several runs: {', '.join(found)}; give more of the id")
    raise ConfigError(f"no run {run_id!r}; `tether flow list` shows the runs")


def own(runtime: Runtime, run: RunRecord, verb: str) -> RunRecord:
    """``run``, if it is this home's to ``verb``; ``ConfigError`` saying where it runs otherwise."""
    if runtime.installation.owns(run.installation):
        return run
    raise ConfigError(
        f"run {run.run_id} runs on host {run.host or 'unknown'} (tether installation "
        f"{run.installation or 'unknown'}), not in this home: {verb} it there"
    )


def answer(
    runtime: Runtime,
    registry: Registry,
    run_id: str,
    task_id: str,
    verb: Verb,
    *,
    args: dict[str, Any] | None = None,
    description: str | None = None,
    reason: str = "",
    by: str = "cli",
) -> RunRecord:
    """A person's answer to the review a task waits on: ``approve`` (run it / accept its result / try
    again), ``reject`` (it does not run; its dependents are skipped), ``edit`` (new arguments or a new
    description, then run it). Recorded once; the run goes on in its next segment."""
    run = own(runtime, find(runtime, run_id), "answer")
    if not run.plan.get("tasks"):
        raise ConfigError(f"run {run.run_id} has no tasks yet: its goal is still being planned")
    plan = Plan.model_validate(run.plan)
    task = plan.task(task_id)
    state = run.task(task_id)
    if task is None or state is None:
        known = ", ".join(t.id for t in plan.tasks[:20])
        raise ConfigError(f"run {run.run_id} has no task {task_id!r}; its tasks: {known}")
    review = state.review or {}
    if state.status != "waiting_for_human" or review.get("answer") is not None:
        waiting = [t.task_id for t in run.tasks if t.status == "waiting_for_human"]
        hint = f"; waiting: {', '.join(waiting)}" if waiting else "; nothing in it waits for a person"
        raise ConfigError(f"task {task_id} of run {run.run_id} does not wait for an answer{hint}")
    kind = review.get("kind", "failed")
    overrides = dict(state.overrides)
    note: dict[str, Any] = {"answer": verb, "by": f"person:{by}", "reason": reason[:500]}
    if verb == "edit":
        if task.call is not None:
            if args is None:
                raise ConfigError(
                    f"{task_id} calls {task.call.task}: give its new arguments with --args JSON"
                )
            overrides["args"] = _validated(registry, plan, task.call.task, args)
        else:
            if not description:
                raise ConfigError(f"{task_id} runs on an executor: give a new --description")
            overrides["description"] = description[:4000]
    if verb == "reject":
        status = "rejected"
    elif kind == "after" or kind == "loop_bound":
        status = "completed" if verb == "approve" else "pending"
    else:
        status = "pending"
        overrides.pop("stage", None)  # the person's go-ahead restarts the retry chain
        overrides.pop("not_before", None)
    if status == "pending" and task.call is not None and kind == "before":
        spec = registry.get(task.call.task, plan.caller, plan.grants_of())
        if task.call.args_from and "args" not in overrides:
            # The values the review showed (read from the context when it opened) are pinned: the person
            # approves those, and exactly those run.
            shown = review.get("args")
            if not isinstance(shown, dict):
                shown, _ = call_args(task, state, context_of(plan, run))
            overrides["args"] = _validated(registry, plan, task.call.task, as_text_where_text(spec, shown))
        clean = _validated(registry, plan, task.call.task, overrides.get("args", task.call.args))
        if spec is not None and spec.danger_for(clean) is not Danger.SAFE:
            # The approval is the person's consent to exactly this call, usable once.
            note["digest"] = call_digest(task.call.task, clean)
            note["nonce"] = secrets.token_hex(12)
    after = runtime.runs.answer(run.run_id, task_id, note, status=status, overrides=overrides)
    if after is None:
        raise ConfigError(f"task {task_id} of run {run.run_id} was answered already")
    faults.point("service.after_answer")  # a crash here: the next executor's reconcile_runs goes on
    if after == "running":
        _continue(runtime, run.run_id)
    record = runtime.runs.get(run.run_id)
    assert record is not None
    return record


def _validated(registry: Registry, plan: Plan, task_id: str, args: Any) -> dict[str, Any]:
    spec = registry.get(task_id, plan.caller, plan.grants_of())
    if spec is None:
        raise ConfigError(f"{task_id} is not available to {plan.caller}")
    if not isinstance(args, dict):
        raise ConfigError("--args must be a JSON object, e.g. '{\"times\": 2}'")
    try:
        validated = validate_params(spec, args)
    except ToolRejected as exc:
        raise ConfigError(f"{task_id}: {exc.message}") from exc
    return {} if validated is None else validated.model_dump(mode="json")


def _continue(runtime: Runtime, run_id: str) -> None:
    run = runtime.runs.view(run_id, task_ids=[])
    assert run is not None
    durable.continue_run(runtime, run_id, run.segment)


def cancel(runtime: Runtime, executor: Any, run_id: str, *, by: str = "cli") -> RunRecord:
    """Cancel a run: it ends ``cancelled``, its segment is cancelled and its jobs are stopped through
    the executor's control entry point."""
    import asyncio

    return asyncio.run(cancel_run(runtime, executor, run_id, by=by))


async def cancel_run(runtime: Runtime, executor: Any, run_id: str, *, by: str = "cli") -> RunRecord:
    """``cancel`` for a caller with an event loop (the web app)."""
    import asyncio

    run = await asyncio.to_thread(find, runtime, run_id)
    if run.terminal:
        raise ConfigError(f"run {run.run_id} is {run.status} already")
    own(runtime, run, "cancel")
    await asyncio.to_thread(runtime.runs.set_status, run.run_id, "cancelled", f"cancelled by {by}")
    # Read again: an attempt that began before the status moved is on record now, and none begins after
    # it (``begin_in``), nor does a call of the run go on record (``store.jobs``).
    run = await asyncio.to_thread(runtime.runs.get, run.run_id) or run
    await asyncio.to_thread(durable.cancel_segment, runtime, run.run_id, run.segment)
    # An agent task's turn runs its tools from its own thread, and is a child workflow of its own.
    turns = [a.execution_id for a in run.attempts if a.status == "running" and "description" in a.how]
    await asyncio.to_thread(durable.cancel_workflows, runtime, turns)
    for origin in [f"run:{run.run_id}", *(f"thread:run-{eid}" for eid in turns)]:
        for job in await asyncio.to_thread(executor.jobs_for, by, origin=origin, active=True, limit=10_000):
            await executor.control(job.execution_id, "stop", caller=by, reason="the run was cancelled")
    for state in run.tasks:
        if state.status in ("pending", "running", "waiting_for_human"):
            await asyncio.to_thread(
                runtime.runs.update_task,
                run.run_id,
                state.task_id,
                status="cancelled",
                message="the run was cancelled",
            )
    record = await asyncio.to_thread(runtime.runs.get, run.run_id)
    assert record is not None
    return record


def resume(runtime: Runtime, run_id: str) -> tuple[RunRecord, str]:
    """Make a run go on: a failed or cancelled run runs its unfinished tasks again; a running run with
    no live segment is enqueued again. (run, what was done)."""
    run = find(runtime, run_id)
    if run.status != "completed":
        own(runtime, run, "resume")
    if run.status == "completed":
        return run, "it is completed: nothing to resume"
    if run.status == "waiting_for_human":
        waiting = [t.task_id for t in run.tasks if t.status == "waiting_for_human"]
        task = waiting[0] if waiting else "TASK"
        return run, f"it waits for a person: tether flow approve|reject|edit {run.run_id} {task}"
    if run.status in ("failed", "cancelled"):
        if not runtime.runs.reopen(run.run_id):
            raise ConfigError(f"run {run.run_id} changed while resuming it; try again")
        _continue(runtime, run.run_id)
        done = "its unfinished tasks run again"
    else:
        status, holder = durable.segment_holder(runtime, run.run_id, run.segment)
        if status in durable.NO_LIVE_SEGMENT:
            _continue(runtime, run.run_id)
            done = "its next segment was enqueued"
        elif (
            status == "PENDING"
            and durable.holder_alive(runtime.home, holder, runtime.installation.host) is False
        ):
            # Its executor died: a live executor of this home takes the segment over within seconds
            # (each watches for dead slots); with none alive, the executor this command starts does.
            done = f"its executor ({holder}) died: it is handed to a live executor"
        else:
            assert status is not None
            done = f"it is {status.lower()} already" + (f" (executor {holder})" if holder else "")
    record = runtime.runs.get(run.run_id)
    assert record is not None
    return record, done


def run_usage(threads: ThreadStore, run: RunRecord) -> dict[str, Any]:
    """What a run's model calls cost (``agent/usage.py``): its goal's planning, each task's (the turns
    of its agent attempts, their delegations included) and the run's total. A task that calls a registry task
    directly asks no model: it costs nothing here."""
    from tether.agent.usage import Totals, threads_totals, totals_of
    from tether.supervisor.conversations import AGENT_THREAD

    planning = totals_of(run.planning)
    total = Totals()
    total.add(planning)
    tasks: dict[str, Any] = {}
    for state in run.tasks:
        ids = [f"{AGENT_THREAD}{a.execution_id}" for a in run.attempts_of(state.task_id)]
        spent = threads_totals(threads, ids)  # an attempt that made no thread has no steps
        total.add(spent)
        tasks[state.task_id] = spent.to_dict()
    return {"total": total.to_dict(), "tasks": tasks, "planning": planning.to_dict()}


def run_document(run: RunRecord, threads: ThreadStore | None = None) -> dict[str, Any]:
    """The ``--json`` shape of one run; with ``threads``, what its model calls cost (``usage``)."""
    usage = run_usage(threads, run) if threads is not None else None
    document = {
        "run_id": run.run_id,
        "status": run.status,
        "goal": run.goal,
        "message": run.message,
        "created_at": run.created_at,
        "ended_at": run.ended_at,
        "tasks": [
            {
                **t.to_dict(),
                "steps": [
                    {
                        "attempt": a.attempt,
                        "execution_id": a.execution_id,
                        "status": a.status,
                        "message": a.message,
                        "duration_seconds": round(a.duration_seconds, 3),
                    }
                    for a in run.attempts_of(t.task_id)
                ],
                **({"usage": usage["tasks"].get(t.task_id)} if usage is not None else {}),
            }
            for t in run.tasks
        ],
    }
    if usage is not None:
        document["usage"] = usage["total"]
        document["planning_usage"] = usage["planning"]
    return document


__all__ = [
    "PlanError",
    "answer",
    "begin_goal",
    "cancel",
    "cancel_run",
    "find",
    "new_run_id",
    "resume",
    "run_document",
    "run_usage",
    "start",
]
