"""A goal in plain words → a plan, with the offline model: each part of the goal becomes a direct call
of one registry task, in the order said, each depending on the one before. A part it is not sure of
stops planning with the same question or explanation the conversation would give; a destructive or
cautious call gets a review point before it (a person confirms it when the run reaches it)."""

from __future__ import annotations

import re

from tether.agent.surface import ToolSurface
from tether.errors import PlanError
from tether.models.offline import OfflineModel
from tether.supervisor.plan import Call, Plan, Task
from tether.supervisor.validate import check
from tether.tasks.spec import Danger, Registry


def _slug(task_id: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", task_id.split(".")[-1])[:40].strip("-_")
    return slug if slug[:1].isalpha() else f"task-{slug}"


def plan_offline(
    goal: str, registry: Registry, *, caller: str = "agent", language: str | None = None
) -> Plan:
    surface = ToolSurface(registry, caller)
    steps = OfflineModel(language).plan(goal, surface.tools, (), open_jobs=())
    said = next((step.say for step in steps if step.say), None)
    if said is not None:
        raise PlanError(said, problems=[{"task": None, "problem": said}])
    tasks: list[Task] = []
    for number, step in enumerate(steps, start=1):
        assert step.tool is not None
        if surface.is_control(step.tool):
            why = (
                "checking on or stopping a job is not a step of a goal: ask it in a conversation "
                "(tether run), or follow the run with tether flow show"
            )
            raise PlanError(why, problems=[{"task": None, "problem": why}])
        spec = surface.spec(step.tool)
        assert spec is not None
        tasks.append(
            Task(
                id=f"{_slug(spec.task_id)}-{number}",
                description=spec.description,
                call=Call(task=spec.task_id, args=dict(step.args)),
                depends_on=[tasks[-1].id] if tasks else [],
                review="none" if spec.danger is Danger.SAFE else "before",
            )
        )
    return check(Plan(goal=goal, caller=caller, tasks=tasks), registry)
