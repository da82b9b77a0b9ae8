"""A goal in plain words → a plan, with the offline model: each part of the goal becomes a direct call
of one registry task, in the order said, each depending on the one before. A part it is not sure of
stops planning with the same question or explanation the conversation would give; a destructive or
cautious call gets a review point before it (a person confirms it when the run reaches it)."""

from __future__ import annotations

import re
from pathlib import Path

from tether.agent.surface import ToolSurface
from tether.errors import PlanError
from tether.models import offline_docs
from tether.models.offline import OfflineModel, Texts
from tether.models.understand import has_cjk
from tether.supervisor.plan import Call, Plan, Task
from tether.supervisor.validate import check
from tether.tasks.spec import Danger, Registry


def _slug(task_id: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", task_id.split(".")[-1])[:40].strip("-_")
    return slug if slug[:1].isalpha() else f"task-{slug}"


PAGES = 3  # search results a research goal reads


def plan_offline(
    goal: str,
    registry: Registry,
    *,
    caller: str = "agent",
    language: str | None = None,
    home: Path | None = None,
) -> Plan:
    surface = ToolSurface(registry, caller, home)
    zh = language == "zh" if language else has_cjk(goal)
    intent = offline_docs.read_intent(goal, surface.tools, zh)
    if intent is not None and intent.kind == "research":
        return check(research_plan(goal, intent, surface, caller), registry)
    steps = OfflineModel(language).plan(goal, surface.tools, (), open_jobs=())
    said = next((step.say for step in steps if step.say), None)
    if said is None and not steps:  # nothing in the goal names a task ("a", "的"): a plan needs a task
        said = Texts(zh).cannot(goal, surface.tools)
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
                review="none" if spec.danger_for(step.args) is Danger.SAFE else "before",
            )
        )
    return check(Plan(goal=goal, caller=caller, tasks=tasks), registry)


def research_plan(goal: str, intent: offline_docs.Intent, surface: ToolSurface, caller: str) -> Plan:
    """A research goal as a DAG: search → read the top pages (in parallel) → summarize each → generate.
    Each step reads what it needs from the context the one before it produced (``args_from``); a page
    the search did not find is skipped, not failed."""
    if surface.spec(offline_docs.SEARCH) is None:
        why = surface.unavailable.get(offline_docs.SEARCH, "web.search is not available to " + caller)
        raise PlanError(why, problems=[{"task": None, "problem": why}])
    topic = intent.topic[:500]
    tasks = [
        Task(
            id="search",
            description=f"Search the web for {topic}",
            call=Call(task="web.search", args={"query": topic, "k": 5}),
            outputs=["data.search"],
        )
    ]
    summaries = []
    for n in range(1, PAGES + 1):
        tasks.append(
            Task(
                id=f"read-{n}",
                description=f"Read search result {n}",
                call=Call(task="web.read_url", args_from={"url": f"data.search/results/{n - 1}/url"}),
                depends_on=["search"],
                outputs=[f"data.page{n}"],
                optional=True,  # one unreadable page of three does not stop the document
            )
        )
        page = f"data.page{n}"
        tasks.append(
            Task(
                id=f"summarize-{n}",
                description=f"Summarize page {n} with its source",
                call=Call(
                    task="web.summarize_text",
                    args={"focus": topic[:200], "cite_as": n},
                    args_from={
                        "text": f"{page}/text",
                        "source_url": f"{page}/url",
                        "source_title": f"{page}/title",
                    },
                ),
                depends_on=[f"read-{n}"],
                outputs=[f"data.summary{n}"],
                optional=True,
            )
        )
        summaries.append(f"data.summary{n}/summary")
    if intent.make:
        formats = list(offline_docs.formats_in_words(goal)) or ["md"]
        args: dict[str, object] = {"title": topic[:200] or goal[:200], "formats": formats}
        if intent.save_to:
            args["save_to"] = intent.save_to
            if intent.overwrite:
                args["overwrite"] = True
        spec = surface.spec(offline_docs.GENERATE)
        tasks.append(
            Task(
                id="generate",
                description="Write the document from the summaries",
                call=Call(
                    task="documents.generate",
                    args=args,
                    args_from={
                        "content": summaries,
                        "sources": [f"data.summary{n}/source" for n in range(1, PAGES + 1)],
                    },
                ),
                depends_on=[f"summarize-{n}" for n in range(1, PAGES + 1)],
                review="before" if spec is not None and spec.danger_for(args) is not Danger.SAFE else "none",
            )
        )
    return Plan(goal=goal, caller=caller, tasks=tasks)
