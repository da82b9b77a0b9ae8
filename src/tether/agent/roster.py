"""The sessions of a team: the agent a turn runs as, the session that speaks as it, and the session a
delegated turn runs in (``agent/team.py`` has the rules; this module builds what they describe).

``team_of`` gives a home's team (its agents, its models by name), ``agent_of`` the agent a turn runs as
(the one named, else the thread's, else the built-in assistant), ``session_for`` the session that speaks
as it, and ``run_child`` runs one delegated turn — directly, or inside the DBOS child workflow
(``supervisor/turns.py``) with the same code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from tether.agent.session import ConversationSession
from tether.agent.steps import DIRECT, MODEL, TurnHalted, perform
from tether.agent.team import (
    AGENT,
    MAX_ANSWER_CHARS,
    Lineage,
    Target,
    Team,
    plain_messages,
)
from tether.config import ModelSettings
from tether.errors import ConfigError, TetherError
from tether.events import EventBus
from tether.execution.executor import Executor
from tether.models.base import Model, TurnContext
from tether.models.factory import nameable
from tether.store.agents import BUILTIN, DEFAULT_AGENT, AgentRecord
from tether.tasks.grants import Grants


def child_session(
    team: Team,
    target: Target,
    lineage: Lineage,
    steps: Any,
    persona_of: str | None = None,
    flows: dict[str, str] | None = None,
) -> ConversationSession:
    """The session a delegated turn runs in: the target's persona, model and grants within its
    delegator's, a bounded step budget that is not extended."""
    s = team.settings
    settings = s.model_copy(
        update={
            "max_steps": s.delegation_max_steps,
            "max_steps_ceiling": s.delegation_max_steps,
            **({"language": target.language} if target.language in ("zh", "en") else {}),
        }
    )
    grants = (target.grants or Grants.of(())).narrowed(lineage.within)
    return ConversationSession(
        team.executor,
        team.model_for(target.model),
        caller=lineage.caller,
        settings=settings,
        threads=team.threads,
        events=team.events,
        detach=True,
        steps=steps,
        persona=persona_of if persona_of is not None else target.persona,
        grants=grants,
        agent=target.name if target.kind == AGENT else f"{target.kind}:{target.name or 'default'}",
        team=team,
        lineage=lineage,
        flows=flows,
        # A delegated turn is remembered where the person talked: the delegator's thread keeps the
        # request and what came back; the sub-agent's own steps are its thread's record, not memories.
        remember=False,
    )


async def run_child(team: Team, payload: Mapping[str, Any], steps: Any) -> dict[str, Any]:
    """Run one delegated turn (or the person's answer to its question) and say how it ended, as JSON.
    The same code runs directly and inside the DBOS child workflow."""
    target = Target.from_json(payload["target"])
    lineage = Lineage.from_json(payload["lineage"])
    thread_id = str(payload["thread_id"])
    request = str(payload["request"])
    if not target.tools:
        return await _plain(team, target, request, steps)
    session = child_session(team, target, lineage, steps, flows=payload.get("flows"))
    answer = payload.get("answer")
    try:
        # (the default agent's threads name none: the session's own assignment does the same)
        stored = None if session.agent_name == DEFAULT_AGENT else session.agent_name
        await _assign(team, thread_id, stored, lineage.parent_step)
        if answer is not None:
            result = await session.confirm(
                thread_id,
                approve=bool(answer["approve"]),
                source=str(answer["source"]),
                pending_id=str(answer["pending_id"]),
            )
        else:
            result = await session.send(thread_id, request)
    except TurnHalted as halt:
        if halt.taken_over:
            raise  # another process goes on with this delegation: its outcome is theirs to give
        return {"status": "failed", "final": f"the delegated turn stopped: {halt.reason}", "steps": 0}
    except TetherError as exc:
        return {"status": "failed", "final": exc.message, "steps": 0}
    worked = [
        s for s in result.steps
        if s.kind == "tool" and s.result is not None and s.result.get("status") in ("completed", "running")
    ]  # fmt: skip
    out: dict[str, Any] = {
        "status": result.status.value,
        "final": result.final[:MAX_ANSWER_CHARS],
        "steps": len(result.steps),
        "tools_run": len(worked),  # the calls that did work: an answer with none did nothing
        "model": session.model_label,
    }
    if result.status.value == "needs_confirmation":
        # Read after the turn ended (no step: a step would find the turn no longer running). A replay
        # reads the same question: only the person's answer changes it, and that answer can only come
        # once this result has put the question to them.
        state = await asyncio.to_thread(team.threads.load, thread_id)
        out["pending"] = None if state is None else state.pending
    return out


async def _plain(team: Team, target: Target, request: str, steps: Any) -> dict[str, Any]:
    """A plain completion (a model named, or the default): one model step, no tools."""

    async def work() -> dict[str, Any]:
        response = await team.model_for(target.model).complete(
            plain_messages(request, target.persona, target.language),
            (),
            context=TurnContext(language=target.language or team.settings.language),
        )
        return {"status": "completed", "final": response.text[:MAX_ANSWER_CHARS], "steps": 0}

    return await perform(steps, MODEL, work)


async def _assign(team: Team, thread_id: str, agent: str | None, parent: str | None) -> None:
    await asyncio.to_thread(team.threads.assign, thread_id, agent, parent)


def team_of(
    executor: Executor,
    model_for: Callable[[str | None], Model],
    events: EventBus | None = None,
    start_flow: Callable[..., dict[str, Any]] | None = None,
) -> Team:
    """The team of ``executor``'s home: its agents, its models by name; ``start_flow`` starts a
    skill's flow (``supervisor/skillflows.py``), given by the layer that can."""
    runtime = executor.runtime
    team = Team(
        executor=executor,
        agents=runtime.agents,
        model_for=model_for,
        threads=runtime.threads,
        events=events or EventBus(),
        settings=runtime.agent_settings,
        runner=run_child,
        start_flow=start_flow,
    )
    team.known_models = lambda name: delegable(team, runtime.model_settings, name)
    return team


def delegable(team: Team, settings: ModelSettings, name: str) -> bool:
    """Whether a delegation may name model ``name``: one this home uses already (``offline``, its
    ``[model]``, a model one of its agents names) or one ``[agent].delegation_models`` lists — never
    just any model of a known provider (a name in a request is not the person's choice of a paid API)."""
    if name == "offline" or name in team.settings.delegation_models:
        return True
    if settings.model and name in (settings.model, f"{settings.provider}/{settings.model}"):
        return nameable(settings, name)
    return any(record.model == name for record in team.roster().values())


def agent_of(team: Team, name: str | None, thread_id: str | None = None) -> AgentRecord:
    """The agent a turn runs as: ``name``, else the one the thread belongs to, else the default.
    ``ConfigError`` names the agents there are when ``name`` is none of them."""
    if name is None and thread_id is not None:
        state = team.threads.load(thread_id)
        name = state.agent if state is not None else None
    if team.agents is None:
        return BUILTIN
    # (the default agent is the built-in assistant, or the person's edit of it when they changed it)
    record = team.agents.get(name or DEFAULT_AGENT)
    if record is None:
        names = ", ".join(r.name for r in team.agents.list())
        raise ConfigError(f"no agent {name!r}; agents: {names} (create one with `tether agents create`)")
    return record


def session_for(
    team: Team,
    record: AgentRecord,
    *,
    steps: Any = None,
    detach: bool = False,
    caller: str = "agent",
    within: Grants | None = None,
    lineage: Lineage | None = None,
    flows: dict[str, str] | None = None,
) -> ConversationSession:
    """A session that speaks as ``record``: its persona, model, language and grants (the built-in
    default: today's assistant, unchanged), able to delegate when its grants say so."""
    s = team.settings
    settings = s.model_copy(update={"language": record.language}) if record.language in ("zh", "en") else s
    session = ConversationSession(
        team.executor,
        team.model_for(record.model),
        settings=settings,
        threads=team.threads,
        events=team.events,
        detach=detach,
        steps=steps if steps is not None else DIRECT,
        persona=record.persona,
        grants=within if record.builtin else record.effective_grants.narrowed(within),
        agent=record.name,
        team=team,
        caller=caller,
        lineage=lineage,
        flows=flows,
        remember=record.memory != "off",
    )
    return session
