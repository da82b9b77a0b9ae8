"""A team of agents: one agent hands work to another through one choke point, ``agents.delegate``.

``agents.delegate(to, request)`` is the only way one agent reaches another. ``to`` resolves, in this
order and nowhere else (``resolve``):

1. an agent's name (or one of its aliases): that agent, with its persona, model and grants;
2. a grant bundle's name (``tasks/grants.py``): a fresh sub-agent with exactly that bundle;
3. a model name: a plain completion by that model, with no tools;
4. nothing or anything else: the home's default model, with no tools, and the trace says so.

No escalation: a sub-agent's effective grants are its own ∩ its delegator's (``Grants.narrowed``); its
calls that need consent still need the *person's*, asked in the thread the person is looking at (the
delegator's): the child's question becomes the parent's, bound to the child's exact call, and the
person's "yes" there runs exactly that call once, in the child's thread. A chain is at most
``[agent].delegation_max_depth`` deep, a delegated turn at most ``delegation_max_steps`` decisions, and
a loop (A → B → A) is refused.

The sessions that run a delegation are built in ``agent/roster.py`` (this module is below the session).
Each delegation is a turn on its own thread (``<parent thread>.d<turn>-<index>``, linked to the parent
step) run by the delegator's ``Steps``: directly in a short-lived process, or as a DBOS child workflow
inside an executor (``supervisor/turns.py``), so a crash mid-delegation resumes where it was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.config import AgentSettings
from tether.models.base import Message, Model, ToolDef
from tether.store.agents import DEFAULT_AGENT, AgentRecord
from tether.tasks.grants import BUNDLE_TEXT, BUNDLES, DELEGATE, Grants
from tether.tasks.result import TaskResult, TaskStatus

if TYPE_CHECKING:
    from tether.events import EventBus
    from tether.execution.executor import Executor
    from tether.store.agents import AgentStore
    from tether.store.threads import ThreadStore

DELEGATE_NAME = DELEGATE.replace(".", "__")
MAX_REQUEST_CHARS = 8000
MAX_ANSWER_CHARS = 8000

AGENT, BUNDLE, MODEL, DEFAULT = "agent", "bundle", "model", "default"


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Who ``to`` named: the kind it resolved as, and what the sub-agent runs with."""

    kind: str  # agent | bundle | model | default
    name: str  # the agent's or bundle's name, the model's, or "" for the default model
    persona: str = ""
    model: str | None = None  # None: the home's [model]
    language: str | None = None
    grants: Grants | None = None  # its own (None for a plain completion: no tools at all)
    note: str = ""  # what the trace says about how ``to`` was understood

    @property
    def tools(self) -> bool:
        return self.kind in (AGENT, BUNDLE)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "name": self.name, "persona": self.persona, "model": self.model,
            "language": self.language, "grants": None if self.grants is None else self.grants.to_json(),
            "note": self.note,
        }  # fmt: skip

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Target:
        return cls(
            kind=str(value["kind"]),
            name=str(value["name"]),
            persona=str(value.get("persona") or ""),
            model=value.get("model"),
            language=value.get("language"),
            grants=Grants.from_json(value.get("grants")),
            note=str(value.get("note") or ""),
        )


def resolve(to: str, agents: Mapping[str, AgentRecord], models: Callable[[str], bool]) -> Target:
    """What ``to`` names, in the one order there is (see the module's docstring). ``models(name)`` says
    whether a model of that name can be asked."""
    wanted = (to or "").strip()
    key = wanted.lower()
    for record in agents.values():
        if key and (key == record.name or key in (a.lower() for a in record.aliases)):
            return Target(
                kind=AGENT,
                name=record.name,
                persona=record.persona,
                model=record.model,
                language=record.language,
                grants=record.effective_grants,
                note=f"agent {record.name}",
            )
    if key in BUNDLES:
        return Target(
            kind=BUNDLE,
            name=key,
            grants=Grants.of((key,)),
            note=f"a fresh sub-agent with the {key} bundle",
        )
    if wanted and models(wanted):
        return Target(kind=MODEL, name=wanted, model=wanted, note=f"a plain completion by {wanted}, no tools")
    why = (
        "nothing was named"
        if not wanted
        else f"{wanted!r} is no agent, bundle or model of this home ([agent].delegation_models)"
    )
    return Target(
        kind=DEFAULT,
        name="",
        note=f"{why}: the home's default model answers, with no tools",
    )


def delegate_tool(agents: Mapping[str, AgentRecord], me: str) -> ToolDef:
    """The tool a manager sees: whom it may hand work to, and the words people use for them."""
    others = {name: record for name, record in agents.items() if name != me}
    names = [*others, *BUNDLES]
    words: dict[str, tuple[str, ...]] = {name: record.aliases for name, record in others.items()}
    listing = "; ".join(f"{name} ({record.description or 'an agent'})" for name, record in others.items())
    bundles = "; ".join(f"{name} ({BUNDLE_TEXT[name]})" for name in BUNDLES)
    return ToolDef(
        name=DELEGATE_NAME,
        description=(
            "Hand one piece of work to another agent and get its answer back. `to`: an agent — "
            f"{listing or 'none defined yet'}; or a bundle, for a fresh helper with exactly those tools "
            f"— {bundles}; or a model name, for a plain answer with no tools. `request`: the whole "
            "task in plain words, with everything the other agent needs (it does not see this thread)."
        ),
        parameters={
            "type": "object",
            "properties": {
                "to": {"type": "string", "description": f"who does it: {', '.join(names)}"},
                "request": {
                    "type": "string",
                    "maxLength": MAX_REQUEST_CHARS,
                    "description": "what to do, in plain words",
                },
            },
            "required": ["to", "request"],
            "additionalProperties": False,
        },
        aliases=("delegate", "hand over", "交给", "委派", "转交"),
        value_words={"to": words},
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Lineage:
    """Where a turn stands in a chain of delegations: who asked whom, and the grants it inherits."""

    chain: tuple[str, ...] = ()  # agent names from the person's agent down to this one
    within: Grants | None = None  # the delegator's effective grants (None: the person's own agent)
    parent_step: str | None = None
    caller: str = "agent"  # the delegator's caller: a sub-agent never reaches past its exposure

    @property
    def depth(self) -> int:
        return max(0, len(self.chain) - 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "chain": list(self.chain),
            "within": None if self.within is None else self.within.to_json(),
            "parent_step": self.parent_step,
            "caller": self.caller,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Lineage:
        if not value:
            return cls()
        return cls(
            chain=tuple(str(c) for c in value.get("chain") or ()),
            within=Grants.from_json(value.get("within")),
            parent_step=value.get("parent_step"),
            caller=str(value.get("caller") or "agent"),
        )


@dataclass(slots=True, kw_only=True)
class Team:
    """What a session needs to delegate: the agents there are, models by name, where children live."""

    executor: Executor
    agents: AgentStore | None
    model_for: Callable[[str | None], Model]
    threads: ThreadStore
    events: EventBus
    settings: AgentSettings
    # Runs one delegated turn (``agent/roster.py``'s ``run_child``): given here, so that the steps that
    # run it (``agent/steps.py``) and this module need not import the session.
    runner: Callable[[Team, Mapping[str, Any], Any], Awaitable[dict[str, Any]]]
    known_models: Callable[[str], bool] = field(default=lambda name: False)
    # Starts a skill's flow as a run (``supervisor/skillflows.py``); None where no run can start.
    start_flow: Callable[..., dict[str, Any]] | None = None

    def roster(self) -> dict[str, AgentRecord]:
        if self.agents is None:
            return {}
        return {record.name: record for record in self.agents.list()}


def child_thread(parent_thread: str, turn: int, index: int) -> str:
    """The delegated turn's thread id: readable, unique per parent step, at most 128 characters."""
    name = f"{parent_thread}.d{turn}-{index}"
    if len(name) <= 128:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{parent_thread[:100]}.d{digest}"


def refusal(message: str, **data: Any) -> TaskResult:
    return _result(TaskStatus.REJECTED, message, data)


def check(target: Target, lineage: Lineage, settings: AgentSettings, zh: bool) -> TaskResult | None:
    """A delegation that may not happen: a loop, or a chain deeper than the settings allow."""
    if target.kind == AGENT and target.name in lineage.chain:
        loop = " → ".join((*lineage.chain, target.name))
        message = f"委派成环被拒绝：{loop}" if zh else f"a delegation loop is refused: {loop}"
        return refusal(message, loop=[*lineage.chain, target.name])
    if lineage.depth + 1 > settings.delegation_max_depth:
        limit = settings.delegation_max_depth
        message = (
            f"委派层数已达上限（[agent].delegation_max_depth = {limit}）：请自己完成或如实汇报"
            if zh
            else f"delegations may go {limit} deep ([agent].delegation_max_depth): do it yourself or report"
        )
        return refusal(message, depth=lineage.depth + 1, max_depth=limit)
    return None


def plain_messages(request: str, persona: str, language: str | None) -> list[Message]:
    system = persona.strip() or (
        "你是一个助手。直接回答请求，不调用任何工具。"
        if language == "zh"
        else "You are an assistant. Answer the request directly; you have no tools."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": request}]


def outcome(target: Target, thread_id: str, done: Mapping[str, Any]) -> TaskResult:
    """The delegate call's result, as the delegator's model reads it."""
    who = target.name or "the default model"
    data: dict[str, Any] = {
        "to": target.name or DEFAULT_AGENT,
        "resolved_as": target.kind,
        "note": target.note,
        "thread_id": thread_id if target.tools else None,
        "steps": done.get("steps", 0),
        "tools_run": done.get("tools_run", 0),
        "answer": done.get("final", ""),
    }
    status = str(done.get("status", "failed"))
    final = done.get("final", "")
    if status == "completed":
        return _result(TaskStatus.COMPLETED, f"{who} answered: {final}", data)
    if status == "needs_confirmation" and done.get("pending"):
        pending = done["pending"]
        return _result(
            TaskStatus.REJECTED,
            f"{who} waits for the person's confirmation of {pending['tool']}; nothing ran",
            {
                **data,
                "needs_confirmation": True,
                "danger": pending.get("danger"),
                "params": pending.get("args"),
                "digest": pending.get("digest"),
                "delegated": {"thread_id": thread_id, "pending_id": pending.get("id"), "agent": who},
            },
            task_id=str(pending["tool"]),  # the sub-agent's own call: what the person is asked about
        )
    return _result(TaskStatus.FAILED, f"{who} did not finish ({status}): {final}", data)


def _result(status: TaskStatus, message: str, data: dict[str, Any], task_id: str = DELEGATE) -> TaskResult:
    return TaskResult(
        task_id=task_id, execution_id="", status=status, message=message[:MAX_ANSWER_CHARS], data=data
    )
