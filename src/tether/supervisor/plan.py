"""A plan: the DAG of tasks a goal or a flow file becomes.

A task either calls one registry task directly (``call``: no model at all) or hands a description to an
executor profile (a model with a system prompt and a tool whitelist = a caller name in the registry). It
declares what it needs and what it produces as context keys in namespaces (``design.api``,
``data.prices``), depends on earlier tasks, may run only ``when`` an earlier task ended a certain way,
may ``loop`` until a condition (with a required ``max_iterations``), and carries its own timeout, retry
policy and ``review`` point (pause for a person before or after it).

These are data: ``validate.py`` checks a plan against a registry (unknown tasks and executors, invalid
arguments through the executor's own validation, missing inputs, cycles) and names every problem.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tether.tasks.grants import Grants

TaskId = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$", description="unique within the plan")]
ContextKey = Annotated[
    str,
    Field(
        pattern=r"^(design|code|data|decisions|artifacts|inputs)\.[A-Za-z0-9_.-]{1,100}$",
        description="a context key in a namespace: "
        "design.*, code.*, data.*, decisions.*, artifacts.*, inputs.*",
    ),
]
# A context key, then optionally a path into its value: ``data.search/results/0/url``.
Ref = Annotated[
    str,
    Field(
        pattern=r"^(design|code|data|decisions|artifacts|inputs)\.[A-Za-z0-9_.-]{1,100}(/[A-Za-z0-9_-]{1,100}){0,8}$",
        description="a context key, then an optional /path into its value, e.g. data.search/results/0/url",
    ),
]
Outcome = Literal["completed", "failed", "stopped", "rejected", "skipped", "unknown"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Call(_Strict):
    """One registry task with its arguments: run through the executor like any other call."""

    task: Annotated[str, Field(min_length=1, max_length=200, description="a task id, e.g. demo.start_game")]
    args: dict[str, Any] = Field(
        default_factory=dict, description="arguments, validated by the task's params"
    )
    args_from: dict[str, Ref | list[Ref]] = Field(
        default_factory=dict,
        description="arguments taken from the context when the task starts: a reference, or a list of them "
        "(missing ones left out; joined with blank lines for a text parameter). A single reference that "
        "is missing skips the task",
    )

    @model_validator(mode="after")
    def _not_both(self) -> Call:
        both = sorted(set(self.args) & set(self.args_from))
        if both:
            raise ValueError(f"{', '.join(both)}: give each argument in args or in args_from, not both")
        return self

    def refs(self) -> list[str]:
        return [
            ref for value in self.args_from.values() for ref in ([value] if isinstance(value, str) else value)
        ]


class When(_Strict):
    """Run only if ``task`` ended with one of ``status`` (and, if given, its output ``key`` equals
    ``equals``); otherwise the task is ``skipped``."""

    task: TaskId
    status: list[Outcome] = Field(default_factory=lambda: ["completed"], min_length=1)
    key: ContextKey | None = None
    equals: Any = None


class Loop(_Strict):
    """Run again until ``until`` holds, at most ``max_iterations`` times (then the failure policy)."""

    until: When
    max_iterations: Annotated[int, Field(ge=1, le=1000)]


class Retry(_Strict):
    """The failure policy chain, as data: at once → later with backoff → another executor → a simpler
    description → a person."""

    at_once: Annotated[int, Field(ge=0, le=10)] = 1
    later: Annotated[int, Field(ge=0, le=20)] = 0
    backoff_s: Annotated[float, Field(gt=0, le=86_400)] = 30.0
    fallback_executor: str | None = None
    simplified: str | None = Field(default=None, max_length=2000)
    then_ask_person: bool = True


class Task(_Strict):
    id: TaskId
    description: str = Field(default="", max_length=4000)
    executor: str | None = Field(default=None, description="an executor profile; not with call")
    call: Call | None = None
    depends_on: list[TaskId] = Field(default_factory=list)
    inputs: list[ContextKey] = Field(default_factory=list)
    outputs: list[ContextKey] = Field(default_factory=list)
    when: When | None = None
    loop: Loop | None = None
    timeout_s: Annotated[float, Field(gt=0, le=7 * 86_400)] | None = None
    heartbeat_s: Annotated[float, Field(gt=0, le=86_400)] | None = Field(
        default=None, description="declare the task stuck (and stop it) after this long without progress"
    )
    retry: Retry = Field(default_factory=Retry)
    review: Literal["none", "before", "after"] = "none"
    optional: bool = Field(
        default=False,
        description="when its retries are used up, the task is skipped (its dependents go on with what "
        "there is) instead of failing or asking a person: one unreadable page of several, say",
    )

    @model_validator(mode="before")
    @classmethod
    def _refs_are_inputs(cls, data: Any) -> Any:
        """The context keys ``call.args_from`` reads are inputs of the task (the engine reads them)."""
        if isinstance(data, dict) and isinstance(data.get("call"), dict | Call):
            call = data["call"]
            refs = call.refs() if isinstance(call, Call) else _raw_refs(call.get("args_from"))
            keys = [ref.split("/", 1)[0] for ref in refs]
            inputs = list(data.get("inputs") or [])
            data = {**data, "inputs": inputs + [k for k in dict.fromkeys(keys) if k not in inputs]}
        return data

    @model_validator(mode="after")
    def _one_way_to_run(self) -> Task:
        if (self.call is None) == (self.executor is None):
            raise ValueError(f"task {self.id!r} needs exactly one of `call` (a registry task) or `executor`")
        if self.call is None and not self.description.strip():
            raise ValueError(f"task {self.id!r} runs on an executor and needs a description of the work")
        return self


def _raw_refs(args_from: Any) -> list[str]:
    if not isinstance(args_from, dict):
        return []
    refs: list[str] = []
    for value in args_from.values():
        items = value if isinstance(value, list) else [value]
        refs += [item for item in items if isinstance(item, str)]
    return refs


class Profile(_Strict):
    """An executor profile: who does a task that is not a direct call."""

    caller: str = Field(
        default="agent", description="the tool whitelist: the registry's tasks exposed to this caller"
    )
    agent: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9_-]{0,39}$",
        description="a named agent (tether agents list): its persona, model, grants; prompt, model here win",
    )
    model: str | None = Field(default=None, description="a model name; none = the home's [model]")
    system_prompt: str = Field(
        default="",
        max_length=20_000,
        description="the agent's role, read by its model after tether's own instructions (it changes none)",
    )


class Plan(_Strict):
    """A goal's DAG. ``context`` seeds ``inputs.*`` keys (what the person gave)."""

    goal: str = Field(default="", max_length=4000)
    caller: str = Field(
        default="agent", pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$", description="who direct calls run as"
    )
    tasks: list[Task] = Field(min_length=1, max_length=2000)
    context: dict[str, Any] = Field(default_factory=dict)
    profiles: dict[str, Profile] = Field(default_factory=dict)
    max_parallel: Annotated[int, Field(ge=1, le=64)] = 4
    timeout_s: Annotated[float, Field(gt=0, le=30 * 86_400)] | None = None
    grants: (
        list[list[Annotated[str, Field(pattern=r"^(\*|[a-z][a-z0-9_]*(\.([a-z][a-z0-9_]*\*?|\*))*\*?)$")]]]
        | None
    ) = Field(
        default=None,
        max_length=16,
        description="an agent's grants (layers of task patterns) the run stays within: set by skills.run",
    )

    chain: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$")]] = Field(
        default_factory=list,
        max_length=16,
        description="the agents that started this run (set by skills.run): delegation's depth counts them",
    )

    def grants_of(self) -> Grants | None:
        """The grants every call of this run is checked against (None: the caller's exposure only)."""
        return Grants.from_json(self.grants)

    def task(self, task_id: str) -> Task | None:
        return next((t for t in self.tasks if t.id == task_id), None)


def schema() -> dict[str, Any]:
    """The JSON schema of a flow file (``flow.schema.json`` ships with tether, for editors)."""
    document = Plan.model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["title"] = "tether flow"
    return document
