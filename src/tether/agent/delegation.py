"""One session's side of ``agents.delegate``: check the call, resolve ``to``, run the child turn as one
delegation step of this turn, and turn its end into the tool's result (``agent/team.py`` has the rules).

A sub-agent's question comes back as this call's ``needs_confirmation`` with the sub-agent's exact call
(task, arguments, digest) and where it waits (``delegated``); the session asks the person in this thread.
The person's "yes" runs this again with ``delegated`` and the consent: the child thread's own question is
answered (by its id, so only that question), and the child's turn goes on from there.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from tether.agent import texts
from tether.agent.skillruns import SKILL_RUN, skills_with_flows
from tether.agent.steps import DELEGATE, TOOL, Steps, perform
from tether.agent.team import (
    MAX_REQUEST_CHARS,
    Lineage,
    Target,
    Team,
    check,
    child_thread,
    outcome,
    refusal,
    resolve,
)
from tether.agent.turn import Turn
from tether.models.base import ToolCall
from tether.tasks.confirm import Confirmation
from tether.tasks.grants import Grants
from tether.tasks.result import TaskResult


class Delegations:
    def __init__(
        self,
        team: Team,
        *,
        me: str,
        grants: Grants | None,
        lineage: Lineage,
        steps: Steps,
        language: str,
        caller: str = "agent",
    ) -> None:
        self.caller = caller
        self.team = team
        self.me = me
        self.grants = grants  # this agent's effective grants: a sub-agent never gets more
        self.chain = lineage.chain or (me,)
        self.steps = steps
        self.language = language

    def _flows(self, target: Target) -> dict[str, str]:
        if self.team.start_flow is None or target.grants is None or not target.grants.allows(SKILL_RUN):
            return {}
        return skills_with_flows(self.team.executor.home)

    async def decline(self, delegated: dict[str, Any], source: str) -> None:
        """The person said no to a sub-agent's question: its own thread hears the same answer (the
        question there is settled, and that turn goes on without the call)."""
        payload = {
            "target": delegated["target"],
            "lineage": delegated["lineage"],
            "thread_id": str(delegated["thread_id"]),
            "request": "",
            "answer": {"approve": False, "source": source, "pending_id": str(delegated["pending_id"])},
        }

        async def work() -> dict[str, Any]:
            return await self.steps.delegate(payload, self.team)

        await perform(self.steps, DELEGATE, work)

    async def _resumed(
        self, delegated: dict[str, Any], source: str
    ) -> TaskResult | tuple[Target, Lineage, str, dict[str, Any]]:
        """What a confirmed delegation resumes with: never more than when the question was asked — the
        delegator's current grants, and the sub-agent's own as they are now (gone: the question is void)."""
        target = Target.from_json(delegated["target"])
        lineage = Lineage.from_json(delegated["lineage"])
        within = self.grants.narrowed(lineage.within) if self.grants else lineage.within
        lineage = replace(lineage, within=within)
        if target.kind == "agent" and self.team.agents is not None:
            record = await asyncio.to_thread(self.team.agents.get, target.name)
            if record is None:
                return refusal(f"agent {target.name!r} no longer exists: its question is void")
            target = replace(target, grants=record.effective_grants.narrowed(target.grants))
        thread_id = str(delegated["thread_id"])
        payload = {
            "target": target.to_json(),
            "lineage": lineage.to_json(),
            "thread_id": thread_id,
            "request": "",
            "answer": {"approve": True, "source": source, "pending_id": str(delegated["pending_id"])},
        }
        return target, lineage, thread_id, payload

    async def run(
        self,
        turn: Turn,
        call: ToolCall,
        index: int,
        consent: Confirmation | None,
        delegated: dict[str, Any] | None,
    ) -> TaskResult:
        zh = texts.zh(turn.message, self.language)
        if delegated is not None:
            if consent is None:
                return refusal("a sub-agent's question is answered only by the person's confirmation")
            resumed = await self._resumed(delegated, consent.source)
            if isinstance(resumed, TaskResult):
                return resumed
            target, lineage, thread_id, payload = resumed
            arguments: dict[str, Any] = dict(delegated.get("call") or {})
        else:
            to, request = call.arguments.get("to"), call.arguments.get("request")
            if not isinstance(request, str) or not request.strip():
                return refusal("request: say what the other agent should do, in plain words")
            if len(request) > MAX_REQUEST_CHARS:
                return refusal(f"request: at most {MAX_REQUEST_CHARS} characters")
            if to is not None and not isinstance(to, str):
                return refusal("to: an agent's name, a bundle's name or a model name")
            here = Lineage(chain=self.chain, within=self.grants, caller=self.caller)

            async def resolution() -> dict[str, Any]:
                # One step: a turn replayed after the team changed resolves ``to`` as it did the first
                # time (the child workflow it started is keyed by this turn's steps, not by the name).
                roster = await asyncio.to_thread(self.team.roster)
                found = resolve(to or "", roster, self.team.known_models)
                refused = check(found, here, self.team.settings, zh)
                return {
                    "target": found.to_json(),
                    "refused": None if refused is None else refused.model_dump(mode="json"),
                }

            resolved = await perform(self.steps, TOOL, resolution)
            if resolved["refused"] is not None:
                return TaskResult.model_validate(resolved["refused"])
            target = Target.from_json(resolved["target"])
            thread_id = child_thread(turn.thread_id, turn.turn, index)
            lineage = Lineage(
                chain=(*self.chain, target.name or "default"),
                within=self.grants,
                parent_step=f"{turn.thread_id}:{turn.turn}:{index}",
                caller=self.caller,
            )
            payload = {
                "target": target.to_json(),
                "lineage": lineage.to_json(),
                "thread_id": thread_id,
                "request": request,
                "answer": None,
            }
            arguments = dict(call.arguments)

        # The skills the sub-agent may run, as they are now: part of what the child turn is given, so
        # a replayed child turn sees the tools it saw.
        payload["flows"] = await asyncio.to_thread(self._flows, target)

        async def work() -> dict[str, Any]:
            return await self.steps.delegate(payload, self.team)

        done = await perform(self.steps, DELEGATE, work)
        result = outcome(target, thread_id, done)
        if result.data.get("delegated"):
            result.data["delegated"].update(
                target=target.to_json(), lineage=lineage.to_json(), call=arguments
            )
        return result
