"""Checking a plan before anything runs: every problem, each named, not the first one only.

A plan runs only if every task's way to run exists (its registry task is exposed to the plan's caller and
its arguments pass the executor's own validation, or its executor profile is known), every dependency and
condition names an earlier task, every input is produced upstream (or given in the plan's context), the
graph has no cycle, and every call that needs a person's consent has a review point before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.errors import PlanError, ToolRejected
from tether.supervisor.plan import Plan, Task
from tether.tasks.spec import Danger, Registry
from tether.tasks.validation import validate_params

BUILTIN_PROFILES = ("agent",)


@dataclass(frozen=True, slots=True)
class Problem:
    task: str | None
    problem: str

    def __str__(self) -> str:
        return f"task {self.task!r}: {self.problem}" if self.task else self.problem

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "problem": self.problem}


def cycle(plan: Plan) -> list[str] | None:
    """One cycle of the dependency graph as a path (``[a, b, a]``), or None."""
    edges = {t.id: [d for d in t.depends_on if plan.task(d) is not None] for t in plan.tasks}
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if state.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for task in plan.tasks:
        if state.get(task.id) is None:
            found = visit(task.id)
            if found:
                return list(reversed(found))
    return None


def ancestors(plan: Plan, task: Task) -> set[str]:
    seen: set[str] = set()
    todo = list(task.depends_on)
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        found = plan.task(current)
        if found is not None:
            todo.extend(found.depends_on)
    return seen


def problems(plan: Plan, registry: Registry) -> list[Problem]:
    caller = plan.caller
    found: list[Problem] = []
    ids = [t.id for t in plan.tasks]
    for duplicate in sorted({i for i in ids if ids.count(i) > 1}):
        found.append(Problem(duplicate, "the id is used by more than one task"))
    known = set(ids)
    loop = cycle(plan)
    if loop is not None:
        found.append(Problem(None, f"the tasks depend on each other in a cycle: {' → '.join(loop)}"))
    for task in plan.tasks:
        for dep in task.depends_on:
            if dep not in known:
                found.append(Problem(task.id, f"depends on {dep!r}, which is not a task of this plan"))
            elif dep == task.id:
                found.append(Problem(task.id, "depends on itself"))
        upstream = ancestors(plan, task) if loop is None else set()
        for condition, what in ((task.when, "when"), (task.loop.until if task.loop else None, "loop.until")):
            if condition is None:
                continue
            if condition.task not in known:
                found.append(
                    Problem(task.id, f"{what} names {condition.task!r}, which is not a task of this plan")
                )
            elif what == "when" and loop is None and condition.task not in upstream:
                found.append(
                    Problem(
                        task.id,
                        f"when names {condition.task!r}, which does not run before it (add it to depends_on)",
                    )
                )
        found += _way_to_run(plan, task, registry, caller)
        if loop is None:
            produced = {key for t in plan.tasks if t.id in upstream for key in t.outputs}
            given = {f"inputs.{k}" for k in plan.context}
            for key in task.inputs:
                if key not in produced and key not in given:
                    found.append(
                        Problem(
                            task.id,
                            f"needs {key!r}, which no earlier task produces and the plan's context lacks",
                        )
                    )
    return found


def _way_to_run(plan: Plan, task: Task, registry: Registry, caller: str) -> list[Problem]:
    if task.executor is not None:
        if task.executor not in plan.profiles and task.executor not in BUILTIN_PROFILES:
            profiles = ", ".join(sorted({*plan.profiles, *BUILTIN_PROFILES}))
            return [
                Problem(task.id, f"executor {task.executor!r} is not a profile of this plan ({profiles})")
            ]
        profile = plan.profiles.get(task.executor)
        if profile is not None and not registry.for_caller(profile.caller, plan.grants_of()):
            return [
                Problem(task.id, f"executor {task.executor!r} may use no task (caller {profile.caller!r})")
            ]
        return []
    assert task.call is not None
    grants = plan.grants_of()
    spec = registry.get(task.call.task, caller, grants)
    if spec is None:
        similar = registry.similar(task.call.task, caller, grants=grants)
        hint = f"; did you mean {', '.join(similar)}?" if similar else ""
        return [
            Problem(task.id, f"calls {task.call.task!r}, which is not a task available to {caller}{hint}")
        ]
    out: list[Problem] = []
    later = set(task.call.args_from)  # filled from the context when the task starts
    fields = spec.params.model_fields if spec.params is not None else {}
    for name in sorted(later - set(fields)):
        out.append(Problem(task.id, f"args_from names {name!r}, which {spec.task_id} does not take"))
    try:
        validate_params(spec, task.call.args)
    except ToolRejected as exc:
        errors = [
            e for e in exc.data.get("errors") or [] if not (e.get("param") in later and "value" not in e)
        ]
        if errors or not later:
            out.append(Problem(task.id, f"calls {spec.task_id} with arguments it refuses: {exc.message}"))
    danger = spec.danger_for(task.call.args)
    if set(task.call.args_from) & set(spec.destructive_if):
        danger = Danger.DESTRUCTIVE  # its value is known only when the task starts: a person must see it
    if danger is not Danger.SAFE and task.review != "before":
        out.append(
            Problem(
                task.id,
                f"calls {spec.task_id}, which is {danger.value}: give the task `review: before` so that "
                "a person confirms that exact call",
            )
        )
    return out


def check(plan: Plan, registry: Registry) -> Plan:
    """``plan`` if it can run, else ``PlanError`` listing every problem."""
    found = problems(plan, registry)
    if found:
        listed = "; ".join(str(p) for p in found)
        raise PlanError(
            f"the plan cannot run ({len(found)} problem{'s' if len(found) > 1 else ''}): {listed}",
            problems=[p.to_dict() for p in found],
        )
    return plan
