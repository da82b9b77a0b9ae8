"""What the engine reads of a run and writes back: the plan parsed once per version, the run as a
decision sees it (only the tasks changed since the last one) and as an attempt sees it (narrowed to the
tasks its policy reads), and the moves a policy makes, with the resource queue kept in step."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tether.execution.admission import execution_id_for
from tether.store.runs import RunRecord, TaskState
from tether.supervisor.host import Host
from tether.supervisor.plan import Plan, Task
from tether.supervisor.policies import Move, executor_of


@dataclass(frozen=True)
class Known:
    """A run's plan, parsed once per version, with what the engine looks up in it per step."""

    plan: Plan
    tasks: dict[str, Task]
    needs: dict[str, list[str]]  # a task → the tasks whose state its policy reads (itself, inputs, loop)
    resources: dict[str, tuple[str, ...]]


_PLANS: dict[str, tuple[int, Known]] = {}


def plan_of(h: Host, run: RunRecord) -> Known:
    cached = _PLANS.get(run.run_id)
    if cached is not None and cached[0] == run.plan_version:
        return cached[1]
    # Read with the run when this process had none of it (``read_for_decide``); else read now.
    document, version = (run.plan, run.plan_version) if run.plan else h.runtime.runs.plan(run.run_id)
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
    known = Known(plan, {t.id: t for t in plan.tasks}, needs, resources_of(h, plan))
    if len(_PLANS) > 256:
        _PLANS.clear()
    _PLANS[run.run_id] = (version, known)
    return known


def resources_of(h: Host, plan: Plan) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for task in plan.tasks:
        if task.call is not None and task.call.task not in out:
            spec = h.executor.registry.get(task.call.task, plan.caller, plan.grants_of())
            out[task.call.task] = spec.resources if spec is not None else ()
    return out


def apply_move(store: Any, run_id: str, move: Move) -> None:
    """The task moved and the resource queue kept in step with it, in one transaction: a task that waits
    for a resource is in the queue (from when it first asked), any other move takes it out."""
    store.move_task(run_id, move.task_id, waiting=waiting_of(move), **move.fields())


def waiting_of(move: Move) -> tuple[list[str], float] | None:
    """The resources ``move`` leaves its task waiting for, and since when; None when it waits for none."""
    stage = (move.overrides or {}).get("stage") or {}
    if move.status == "pending" and stage.get("waiting_for"):
        return list(stage["waiting_for"]), float(stage.get("waiting_since") or 0)
    return None


@dataclass(frozen=True)
class Opened:
    """An attempt about to run: the plan, the run narrowed to what its policy reads, its task."""

    known: Known
    run: RunRecord
    task: Task
    state: TaskState
    execution_id: str


def open_attempt(h: Host, run_id: str, task_id: str, number: int) -> dict[str, Any] | Opened:
    """Read what attempt ``number`` needs (its decision recorded it as started), in one trip to a thread;
    a dict when there is nothing to run (its outcome is on record already, or the run was cancelled)."""
    known, run = read_for_attempt(h, run_id, task_id)
    state = run.task(task_id)
    assert state is not None
    if state.attempts > number or (state.attempts == number and state.status != "running"):
        return {"status": state.status, "settled": True}  # this attempt's outcome is on record
    if run.status == "cancelled":
        return {"status": "cancelled"}
    return Opened(
        known, run, known.tasks[task_id], state, execution_id_for("run", run_id, task_id, str(number))
    )


_SEEN: dict[str, tuple[int, dict[str, TaskState]]] = {}


def read_for_decide(h: Host, run_id: str) -> RunRecord | None:
    """The run for ``decide``, every task in full: this process keeps the tasks it saw and reads only
    those changed since (by the run's revision), so a decision costs the same at task 1 and task 1,000.
    A run whose plan this process has not parsed yet comes with it (``plan_of`` then reads nothing)."""
    seen = _SEEN.get(run_id)
    got = h.runtime.runs.changes(run_id, seen[0] if seen else -1, plan=run_id not in _PLANS)
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


def forget(run_id: str) -> None:
    """A run that ended without a decision's read: what this process kept of it goes."""
    _SEEN.pop(run_id, None)


def read_for_attempt(h: Host, run_id: str, task_id: str) -> tuple[Known, RunRecord]:
    """The plan (cached per version) and the run narrowed to the tasks this task's policy reads (its
    attempts are read by ``_finish`` only when it failed): one read when the plan is known already."""
    cached = _PLANS.get(run_id)
    if cached is not None and task_id in cached[1].needs:
        run = h.runtime.runs.view(run_id, task_ids=cached[1].needs[task_id])
        if run is not None and run.plan_version == cached[0]:
            return cached[1], run
    head = h.runtime.runs.view(run_id, task_ids=[task_id])
    assert head is not None
    known = plan_of(h, head)
    run = h.runtime.runs.view(run_id, task_ids=known.needs[task_id])
    assert run is not None
    return known, run


def how(task: Task, state: TaskState, caller: str) -> dict[str, Any]:
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
