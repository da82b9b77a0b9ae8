"""A goal → a plan of milestones, by a model; or of direct calls, by the offline planner.

The model sees the goal and the names and descriptions of the tools its executor may use, and submits
3–10 milestones through one tool (``submit_plan``): each a piece of work in plain words with the
milestones it needs first. A milestone becomes a task for the ``agent`` executor profile, so it is
expanded into concrete tool calls only when it is scheduled — by an agent turn restricted to the same
tool whitelist, through the executor like every call. The plan is validated like a flow file.

With the offline model (no key, no network) ``goals.plan_offline`` maps the goal onto direct calls
instead; it says plainly when a goal is beyond its tools.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tether.agent.surface import ToolSurface
from tether.agent.usage import call_record
from tether.errors import PlanError
from tether.models.base import Message, Model, ModelResponse, ToolDef
from tether.models.offline import OfflineModel
from tether.supervisor.goals import plan_offline
from tether.supervisor.plan import Plan, Task
from tether.supervisor.validate import check
from tether.tasks.spec import Registry

MIN_MILESTONES, MAX_MILESTONES = 1, 10
SUBMIT = "submit_plan"

PROMPT = """You plan work for an automation runtime. Split the person's goal into 3 to 10 milestones \
(fewer only when the goal is that small). A milestone is one piece of work an assistant can finish with \
the tools listed below, described in plain words in the person's language; name the milestones it needs \
first in depends_on. Do not call the tools: plan only, by calling submit_plan once.
If the goal needs something no tool can do, submit no milestones and say why in `beyond`.

Example — goal "start the game, farm gold 3 times, then do the daily training and quit":
  m1 "Start the game"; m2 "Farm the gold instance 3 times" (after m1); m3 "Do the daily training" (after m2);
  m4 "Exit the game" (after m3).

Tools:
{tools}"""

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "milestones": {
            "type": "array",
            "maxItems": MAX_MILESTONES,
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_-]{0,63}$"},
                    "description": {"type": "string", "maxLength": 2000},
                    "depends_on": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "description"],
            },
        },
        "beyond": {"type": "string", "description": "why the goal cannot be done with these tools"},
    },
    "required": ["milestones"],
}


async def plan_goal(
    goal: str,
    registry: Registry,
    model: Model,
    *,
    caller: str = "agent",
    home: Path | None = None,
    spent: list[dict[str, Any]] | None = None,
) -> tuple[Plan, str]:
    """The plan for ``goal`` and a note on how it was made ("" when as asked): milestones from
    ``model``, or direct calls with the offline model. With ``home``, the home's installed skills are
    offered: a milestone may name one for its agent to follow.

    A plan the model gets wrong is sent back once, with what is wrong with it; wrong again, the goal is
    planned offline when the offline planner can (the note says why), else ``PlanError`` names the
    model's problems. Each model call's cost (``agent/usage.py``) is appended to ``spent``."""
    if isinstance(model, OfflineModel):
        return plan_offline(goal, registry, caller=caller, home=home), ""
    surface = ToolSurface(registry, caller, home)
    tools = "\n".join(f"- {t.name}: {t.description}" for t in surface.tools if not surface.is_control(t.name))
    skills = _skills(surface, home)
    system = PROMPT.format(tools=tools)
    schema = PLAN_SCHEMA
    if skills:
        listing = "\n".join(skill.listing() for skill in skills.values())
        system += f"\n\n{SKILLS_PROMPT}\n{listing}"
        schema = copy.deepcopy(PLAN_SCHEMA)
        item = schema["properties"]["milestones"]["items"]["properties"]
        item["skill"] = {"type": "string", "enum": sorted(skills), "description": "a skill to follow"}
    messages: list[Message] = [{"role": "system", "content": system}, {"role": "user", "content": goal}]
    submit = ToolDef(name=SUBMIT, description="Submit the plan (milestones in order).", parameters=schema)
    response = await _complete(model, messages, submit, spent)
    try:
        return _plan(goal, _document(response), registry, caller, skills=sorted(skills)), ""
    except PlanError as exc:
        if _beyond(exc):
            raise  # the model says no tool can do it: asking again would not change that
        first = exc
    messages += [
        response.to_message(),
        *_answers(response, first.message),
        {"role": "user", "content": REPAIR.format(why=first.message)},
    ]
    response = await _complete(model, messages, submit, spent)
    try:
        return _plan(goal, _document(response), registry, caller, skills=sorted(skills)), ""
    except PlanError as exc:
        if _beyond(exc):
            raise
        second = exc
    try:
        plan = plan_offline(goal, registry, caller=caller, home=home)
    except PlanError as exc:
        raise PlanError(
            f"the model's plan could not be used, even after one repair request: {second.message}",
            problems=second.data.get("problems", []),
        ) from exc
    return plan, f"planned offline: the model's plan could not be used ({second.message})"


async def _complete(
    model: Model, messages: list[Message], submit: ToolDef, spent: list[dict[str, Any]] | None
) -> ModelResponse:
    started = time.monotonic()
    response = await model.complete(messages, [submit])
    if spent is not None:
        spent.append(call_record(model, response, time.monotonic() - started))
    return response


REPAIR = (
    "That plan cannot be used: {why}. Call submit_plan once more with a corrected plan: ids are "
    "letters, digits, '_' or '-' and start with a letter, every depends_on names a milestone of the plan, "
    "and the milestones form no cycle."
)


def _beyond(exc: PlanError) -> bool:
    return bool(exc.data.get("beyond"))


def _answers(response: ModelResponse, why: str) -> list[Message]:
    """The tool messages that answer the model's calls, so the conversation stays well formed."""
    return [
        {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": f"refused: {why}"}
        for call in response.tool_calls
    ]


SKILLS_PROMPT = (
    "Skills the assistant can load (instructions for a kind of work; name one in a milestone's `skill` "
    "when it fits):"
)


def _skills(surface: ToolSurface, home: Path | None) -> dict[str, Any]:
    if home is None or surface.spec(surface.tool_name("skills.read")) is None:
        return {}
    from tether.toolkits.skills.library import SkillLibrary

    return dict(SkillLibrary(home).skills)


def _document(response: Any) -> dict[str, Any]:
    for call in response.tool_calls:
        if call.name == SUBMIT and isinstance(call.arguments, dict):
            return call.arguments
    text = response.text or ""
    if "{" in text:  # a model that wrote the plan as text
        from tether.models.jsonfix import loads_lenient

        parsed = loads_lenient(text)
        if isinstance(parsed, dict):
            return parsed
    why = text.strip()[:500] or "the model submitted no plan"
    raise PlanError(f"the planner gave no plan: {why}", problems=[{"task": None, "problem": why}])


MILESTONE_ID = "letters, digits, '_' or '-', starting with a letter (at most 64)"


def _said(exc: ValidationError, raw: dict[str, Any]) -> str:
    """What is wrong with one milestone, in words (not pydantic's "1 validation error for Task")."""
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error.get("loc") else "it"
        if field == "id":
            problems.append(f"has the id {str(raw.get('id', ''))[:80]!r}; an id is {MILESTONE_ID}")
        else:
            problems.append(f"has a bad {field}: {error.get('msg', 'not valid')}")
    return "; ".join(problems) or "is not valid"


def _plan(
    goal: str, document: dict[str, Any], registry: Registry, caller: str, *, skills: list[str] | None = None
) -> Plan:
    milestones = document.get("milestones")
    beyond = document.get("beyond")
    if not milestones:
        why = str(beyond or "the planner found nothing to do for this goal")[:500]
        raise PlanError(why, problems=[{"task": None, "problem": why}], beyond=bool(beyond))
    if not isinstance(milestones, list) or not MIN_MILESTONES <= len(milestones) <= MAX_MILESTONES:
        raise PlanError(
            f"the planner must give {MIN_MILESTONES}–{MAX_MILESTONES} milestones, got {len(milestones)}",
            problems=[{"task": None, "problem": "too many milestones"}],
        )
    tasks = []
    for raw in milestones:
        if not isinstance(raw, dict):
            raise PlanError(f"a milestone is not an object: {json.dumps(raw)[:200]}")
        description = str(raw.get("description", ""))
        skill = raw.get("skill")
        if isinstance(skill, str) and skill in (skills or ()):
            description += f"\n\nFollow the skill {skill!r}: read it first with skills__read."
        try:
            tasks.append(
                Task(
                    id=str(raw.get("id", "")),
                    description=description[:4000],
                    executor="agent",
                    depends_on=[str(d) for d in raw.get("depends_on") or []],
                )
            )
        except ValidationError as exc:
            raise PlanError(f"milestone {len(tasks) + 1} {_said(exc, raw)}") from exc
    plan = Plan(goal=goal, caller=caller, tasks=tasks)
    return check(plan, registry)
