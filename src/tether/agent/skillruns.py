"""``skills.run(skill, inputs)``: a skill that carries a flow (``flow.yaml`` beside its ``SKILL.md``) is
started as a goal run (seed 003's ``execute_skill``).

The run is validated like any plan and goes through its review points; it runs as this session's
caller (whatever the flow file says, its own caller and its profiles' callers are replaced by it) and
within this session's grants (``Plan.grants``: every call of the run, and every agent task in it, is
checked against them), so a skill is never a way around what the agent may do. The run id derives from
the step, so a replayed turn finds the run it started instead of starting another. What starts it is
the team's ``start_flow`` (``supervisor/skillflows.py``: this layer does not reach the supervisor).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from tether.agent.steps import TOOL, Steps, perform
from tether.agent.turn import Turn
from tether.errors import TetherError
from tether.models.base import ToolCall, ToolDef
from tether.tasks.grants import Grants
from tether.tasks.result import TaskResult, TaskStatus

SKILL_RUN = "skills.run"
SKILL_RUN_NAME = "skills__run"
FLOW_FILE = "flow.yaml"


def skills_with_flows(home: Path) -> dict[str, str]:
    """The installed skills that carry a flow: name → description."""
    from tether.toolkits.skills.library import SkillLibrary

    library = SkillLibrary(home)
    found = {}
    for name in library.names():
        skill = library.get(name)
        if skill is not None and FLOW_FILE in skill.resources:
            found[name] = skill.description
    return found


def skill_run_tool(skills: dict[str, str]) -> ToolDef:
    listing = "; ".join(f"{name} ({about})" for name, about in skills.items())
    return ToolDef(
        name=SKILL_RUN_NAME,
        description=(
            f"Start a skill's flow as a run of its own (it goes on in the background): {listing}. "
            "`inputs` are the values the flow asks for (its inputs.* keys). Returns the run id; the "
            "person follows it with `tether flow show RUN` or on the page."
        ),
        parameters={
            "type": "object",
            "properties": {
                "skill": {"type": "string", "enum": list(skills), "description": "the skill to run"},
                "inputs": {"type": "object", "description": "the flow's inputs, by name"},
            },
            "required": ["skill"],
            "additionalProperties": False,
        },
        aliases=("run skill", "execute skill", "运行技能", "执行技能"),
        background=True,
    )


def run_id_for(step_id: str) -> str:
    return "run-" + hashlib.sha256(f"skill:{step_id}".encode()).hexdigest()[:16]


class SkillRuns:
    def __init__(
        self,
        start_flow: Any,
        *,
        caller: str,
        grants: Grants | None,
        steps: Steps,
        chain: tuple[str, ...] = (),
    ) -> None:
        # (skill, inputs, caller, grants, run_id, chain=) -> {"run_id", "status"}
        self.start_flow = start_flow
        self.caller = caller
        self.grants = grants
        self.steps = steps
        self.chain = chain  # the agents from the person's down to this one: the run's agents go below

    async def run(self, turn: Turn, call: ToolCall, index: int) -> TaskResult:
        skill, inputs = call.arguments.get("skill"), call.arguments.get("inputs") or {}
        if not isinstance(skill, str) or not isinstance(inputs, dict):
            return _result(TaskStatus.REJECTED, "skill: a skill's name; inputs: an object of values")
        run_id = run_id_for(f"{turn.thread_id}:{turn.turn}:{index}")

        async def work() -> dict[str, Any]:
            try:
                started = await asyncio.to_thread(
                    self.start_flow, skill, inputs, self.caller, self.grants, run_id, chain=self.chain
                )
            except TetherError as exc:
                return {"refused": exc.message}
            return {"started": started}

        done = await perform(self.steps, TOOL, work)
        if "refused" in done:
            return _result(TaskStatus.REJECTED, f"skill {skill!r} was not started: {done['refused']}")
        started = done["started"]
        return _result(
            TaskStatus.RUNNING,
            f"skill {skill} runs as {started['run_id']} (tether flow show {started['run_id']} follows it)",
            run_id=started["run_id"],
            run_status=started.get("status"),
        )


def _result(status: TaskStatus, message: str, **data: Any) -> TaskResult:
    return TaskResult(task_id=SKILL_RUN, execution_id="", status=status, message=message, data=data)
