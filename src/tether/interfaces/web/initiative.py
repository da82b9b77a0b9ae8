"""The API's initiative: signals sent in (``POST /api/signals``), what agents decided about them and
the ratings of their messages (``/api/initiative``), and schedules (``/api/schedules``). The same as
``tether signal``, ``tether initiative`` and ``tether schedule``."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query
from pydantic import Field, StrictBool

from tether.interfaces.web.context import MAX_INT, WebContext
from tether.interfaces.web.documents import ApiError, _Doc, _Input, not_found

AgentName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$")]
ScheduleName = Annotated[str, Path(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")]


class SignalIn(_Input):
    """Something that happened: the agent decides whether to tell the person."""

    kind: Literal["message", "outside", "file"] = "outside"
    text: str = Field(min_length=1, max_length=4000)
    source: str = Field(default="", max_length=200)
    agent: AgentName = "assistant"
    priority: Literal["normal", "high", "urgent"] = "normal"
    key: str | None = Field(default=None, min_length=1, max_length=300)


class DecisionDoc(_Doc):
    id: int
    agent: str
    kind: str
    signal: dict[str, Any]
    fired: bool
    category: str
    score: float
    threshold: float
    reason: str
    decided_by: str
    thread_id: str | None
    turn: int | None
    message: str | None
    rating: int | None
    rating_note: str | None
    created_at: str
    agent_threshold: float | None = None


class DecisionList(_Doc):
    decisions: list[DecisionDoc]


class RatingIn(_Input):
    """👍 (1) or 👎 (-1), with a word."""

    rating: Literal[1, -1]
    note: str = Field(default="", max_length=200)


class ScheduleIn(_Input):
    """A schedule: the daily report, or a reminder when ``remind`` has its words."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")
    cron: str = Field(min_length=1, max_length=120)
    remind: str = Field(default="", max_length=500)
    agent: AgentName = "assistant"
    timezone: str | None = Field(default=None, max_length=64)
    catch_up: StrictBool = False


class ScheduleDoc(_Doc):
    name: str
    cron: str
    action: str
    text: str
    agent: str
    timezone: str | None
    catch_up: bool
    last_fired_at: str | None
    status: str


class ScheduleList(_Doc):
    schedules: list[ScheduleDoc]


class Fired(_Doc):
    fired: str
    workflow_id: str


class Removed(_Doc):
    removed: str


def router(ctx: WebContext) -> APIRouter:
    from tether.supervisor import schedules

    router = APIRouter()
    runtime = ctx.runtime

    @router.post("/api/signals", response_model=DecisionDoc)
    async def send_signal(body: SignalIn) -> DecisionDoc:
        """Tell an agent something happened; it decides (and says why) whether to tell the person."""

        from tether.agent.decider import Signal
        from tether.models.factory import models_for
        from tether.supervisor.initiative import consider, decider_model

        if await asyncio.to_thread(runtime.agents.get, body.agent) is None:
            raise ApiError(400, "invalid", f"no agent {body.agent!r}")
        signal = Signal(
            kind=body.kind, text=body.text, source=body.source, agent=body.agent, key=body.key,
            data={"priority": body.priority} if body.priority != "normal" else {},
        )  # fmt: skip
        model_for = None if ctx.offline else models_for(runtime)
        model = await asyncio.to_thread(decider_model, runtime, model_for, body.agent)
        record = await consider(runtime, signal, model=model)
        return DecisionDoc(**record.to_dict())

    @router.get("/api/initiative", response_model=DecisionList)
    def list_decisions(
        agent: Annotated[str | None, Query(pattern=r"^[a-z][a-z0-9_-]{0,39}$")] = None,
        fired: bool | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    ) -> DecisionList:
        """The newest decisions: fired or silent, the category, the score against the threshold, why."""
        found = runtime.initiative.decisions(agent=agent, fired=fired, limit=limit)
        return DecisionList(decisions=[DecisionDoc(**d.to_dict()) for d in found])

    @router.post("/api/initiative/{decision_id}/rating", response_model=DecisionDoc)
    def rate(decision_id: Annotated[int, Path(ge=1, le=MAX_INT)], body: RatingIn) -> DecisionDoc:
        """Rate a proactive message; the answer carries the agent's new threshold."""
        from tether.config import InitiativeSettings

        if runtime.initiative.get(decision_id) is None:
            raise not_found(f"no decision {decision_id}")
        default = InitiativeSettings.load(runtime.home).threshold
        record, threshold = runtime.initiative.rate(decision_id, body.rating, body.note, default=default)
        return DecisionDoc(**record.to_dict(), agent_threshold=round(threshold, 3))

    @router.get("/api/schedules", response_model=ScheduleList)
    async def list_schedules() -> ScheduleList:
        found = await asyncio.to_thread(schedules.listed, runtime)
        return ScheduleList(schedules=[ScheduleDoc(**s.to_dict()) for s in found])

    @router.post("/api/schedules", response_model=ScheduleDoc)
    async def add_schedule(body: ScheduleIn) -> ScheduleDoc:
        made = await asyncio.to_thread(
            schedules.add, runtime, body.name, body.cron, action="remind" if body.remind else "report",
            text=body.remind, agent=body.agent, timezone=body.timezone, catch_up=body.catch_up,
        )  # fmt: skip
        return ScheduleDoc(**made.to_dict())

    @router.delete("/api/schedules/{name}", response_model=Removed)
    async def remove_schedule(name: ScheduleName) -> Removed:
        if not await asyncio.to_thread(schedules.remove, runtime, name):
            raise not_found(f"no schedule {name!r}")
        return Removed(removed=name)

    @router.post("/api/schedules/{name}/run", response_model=Fired)
    async def run_schedule(name: ScheduleName) -> Fired:
        workflow_id = await asyncio.to_thread(schedules.run_now, runtime, name)
        return Fired(fired=name, workflow_id=workflow_id)

    return router
