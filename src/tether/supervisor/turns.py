"""Conversation turns that survive a crash: each model call and each tool execution is one DBOS step.

``DurableSteps`` is the ``Steps`` of a ``ConversationSession`` (``agent/steps.py``) inside a DBOS
workflow. When the executor running the turn dies, the next executor recovers the workflow and replays
the turn: the steps that finished return what they returned (no model is asked twice, no tool runs
twice), everything the turn writes between steps is keyed by its step and written once, and the turn
goes on from the first step that did not finish — a tool step under its own execution id, which the
executor adopts, re-attaches or reports ``unknown``.

Before each step it runs for the first time, a durable turn makes sure it is still the turn's owner
(``ThreadStore.hold_turn``: the record names this process) and that its deadline has not passed; if
not, the step answers ``halt`` and the turn stops there.

A person's turn runs here too when ``tether run`` finds an executor running: it is enqueued as the
workflow ``tether.turn`` (``durable.enqueue_turn``) and the command follows the thread's events.

Only executor processes import this module (it registers the steps with DBOS).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dbos import DBOS

from tether.agent.roster import agent_of, run_child, session_for, team_of
from tether.agent.skillruns import SKILL_RUN, skills_with_flows
from tether.agent.steps import DELEGATE, MODEL, OPEN, StepWork, TurnHalted
from tether.agent.surface import ToolSurface
from tether.agent.team import Lineage
from tether.errors import TetherError
from tether.execution import process
from tether.execution.protocol import clip
from tether.store.agents import AgentRecord
from tether.store.threads import StepRecord, ThreadStore
from tether.supervisor import durable
from tether.tasks.grants import Grants

if TYPE_CHECKING:
    from tether.supervisor.host import Host

TIMED_OUT = "stopped: the task's deadline passed"


@dataclass
class DurableSteps:
    threads: ThreadStore
    thread_id: str
    deadline: float | None = None  # epoch seconds; no new step starts after it
    number: int | None = None  # the turn, once opened
    durable: bool = True

    async def __call__(self, kind: str, work: StepWork) -> dict[str, Any]:
        if kind == OPEN:
            out = await _open(self, work)
            if "number" in out and not out.get("error"):
                self.number = int(out["number"])
                if not await self._hold():  # a replay: is the turn still this workflow's to go on with?
                    record = await asyncio.to_thread(self.threads.turn, self.thread_id, self.number)
                    ended = record is not None and record.status not in (
                        "running",
                        "interrupted",
                        "recovered",
                    )
                    why = "the turn had ended" if ended else "another process recovered this turn"
                    return {**out, "halt": why, "taken_over": not ended, "ended": ended}
            return out
        if kind == MODEL:
            return await _model(self, work)
        if kind == DELEGATE:
            # Not a step: the child turn is a workflow of its own, started from this workflow, so its
            # steps are recorded there and a replay of this turn waits for (or reads) its result.
            if self.number is not None and not await self._hold():
                return {"halt": "another process recovered this turn", "taken_over": True}
            return await work()
        return await _tool(self, work)

    async def delegate(self, payload: dict[str, Any], team: Any) -> dict[str, Any]:
        """Run a delegated turn as a DBOS child workflow of this turn's workflow."""
        return await run_delegation(payload, self.deadline)

    async def fresh(self, work: StepWork) -> dict[str, Any]:
        """A step that runs for the first time: halt past the deadline or when the turn is not ours."""
        if self.number is not None and not await self._hold():
            return {"halt": "another process recovered this turn", "taken_over": True}
        if self.deadline is not None and time.time() > self.deadline:
            return {"halt": TIMED_OUT}
        return await work()

    async def _hold(self) -> bool:
        """Make this process the turn's owner; False when the turn is not running any more."""
        assert self.number is not None
        me = process.current()
        return bool(
            await asyncio.to_thread(
                self.threads.hold_turn, self.thread_id, self.number, (me.pid, me.create_time)
            )
        )


@DBOS.step(name="tether.turn.open", retries_allowed=False)
async def _open(steps: DurableSteps, work: StepWork) -> dict[str, Any]:
    return await work()


@DBOS.step(name="tether.turn.model", retries_allowed=False)
async def _model(steps: DurableSteps, work: StepWork) -> dict[str, Any]:
    return await steps.fresh(work)


@DBOS.step(name="tether.turn.tool", retries_allowed=False)
async def _tool(steps: DurableSteps, work: StepWork) -> dict[str, Any]:
    return await steps.fresh(work)


@DBOS.step(name="tether.turn.agent", retries_allowed=False)
async def _shape(read: Any) -> dict[str, Any]:
    """Who a turn speaks as, read once: the agent's record (persona, model, grants) and the skills that
    run, as they were when the turn began. A replay after the agent was edited (or a skill installed)
    builds the same session, so it asks for the same tools and takes the same kind of step at each
    point of the record."""
    try:
        return await asyncio.to_thread(read)
    except TetherError as exc:
        return {"error": exc.message}


def _shape_of(h: Host, record: AgentRecord) -> dict[str, Any]:
    may_run = record.builtin or record.effective_grants.allows(SKILL_RUN)
    flows = skills_with_flows(h.executor.home) if may_run else {}
    return {"agent": record.to_dict(), "flows": flows}


def lineage_of(opened: dict[str, Any], name: str, within: Grants | None) -> Lineage:
    """Where an agent task of a run stands: one hop below the chain of agents that started the run (a
    skill's flow), so delegation's depth and loop checks count the hops that led here."""
    chain = tuple(str(c) for c in opened.get("chain") or ())
    return Lineage(chain=(*chain, name), within=within, caller=str(opened.get("caller") or "agent"))


@DBOS.workflow(name=durable.TURN_WORKFLOW)
async def run_turn(request: dict[str, Any]) -> dict[str, Any]:
    """A person's conversation turn, dispatched to this executor (``tether run`` while an executor
    runs): ``{"thread_id", "message"}``, or ``{"thread_id", "confirm": true}`` to run the one call the
    thread waits on (``"approve": false`` declines it instead). Its ``TurnResult`` as a dict, or
    ``{"error": ...}`` for a request that cannot run."""
    from tether.supervisor.host import host

    h = host()
    if h.model_for is None:
        return {"error": "this executor has no model configured"}
    thread_id = str(request.get("thread_id", ""))
    steps = DurableSteps(h.runtime.threads, thread_id)
    team = team_of(h.executor, h.model_for, start_flow=_flows(h))
    agent = request.get("agent")
    wanted = None if agent is None else str(agent)
    shape = await _shape(lambda: _shape_of(h, agent_of(team, wanted, thread_id)))
    if "error" in shape:
        return {"error": shape["error"]}
    record, flows = AgentRecord.from_dict(shape["agent"]), shape["flows"]
    try:
        session = await asyncio.to_thread(
            lambda: session_for(team, record, steps=steps, detach=True, flows=flows)
        )
    except TetherError as exc:
        return {"error": exc.message}
    try:
        if request.get("confirm"):
            source = str(request.get("source", "person:cli"))
            asked = request.get("pending_id")
            result = await session.confirm(
                thread_id,
                approve=bool(request.get("approve", True)),
                source=source,
                pending_id=None if asked is None else str(asked),
            )
        else:
            formats = request.get("formats")
            result = await session.send(
                thread_id,
                str(request.get("message", "")),
                formats=[str(f) for f in formats] if isinstance(formats, list) else (),
                images=request.get("images") or (),
            )
    except TurnHalted as halt:
        return {"error": f"the turn stopped: {halt.reason}"}
    except TetherError as exc:
        return {"error": exc.message}
    return {**result.to_dict(), "model": session.model_label, "agent": session.agent_name}


@DBOS.workflow(name=durable.DELEGATION_WORKFLOW)
async def run_delegation(payload: dict[str, Any], deadline: float | None) -> dict[str, Any]:
    """One delegated turn (``agent/team.py``), a child workflow of the delegator's turn: its model and
    tool calls are steps of this workflow, so a crash resumes it where it was and runs no tool twice."""
    from tether.supervisor.host import host

    h = host()
    assert h.model_for is not None
    steps = DurableSteps(h.runtime.threads, str(payload["thread_id"]), deadline)
    return await run_child(team_of(h.executor, h.model_for, start_flow=_flows(h)), payload, steps)


async def agent_turn(h: Host, opened: dict[str, Any]) -> list[Any]:
    """Run an agent task's turn (inside its attempt's workflow); [outcome, message, data]."""
    assert h.model_for is not None
    thread_id = str(opened["thread_id"])
    steps = DurableSteps(h.runtime.threads, thread_id, opened.get("deadline"))
    shape: dict[str, Any] = {"flows": {}}
    if opened.get("agent"):
        team = team_of(h.executor, h.model_for, start_flow=_flows(h))
        shape = await _shape(lambda: _shape_of(h, agent_of(team, str(opened["agent"]))))
        if "error" in shape:
            return ["rejected", f"the task's agent cannot run: {shape['error']}", {"thread_id": thread_id}]
    try:
        session = await asyncio.to_thread(_agent_session, h, opened, steps, shape)
    except TetherError as exc:
        return ["rejected", f"the task's agent cannot run: {exc.message}", {"thread_id": thread_id}]
    try:
        result = await session.send(thread_id, str(opened["ask"]))
    except TurnHalted as halt:
        return ["unknown", f"the agent's turn: {halt.reason}", {"thread_id": thread_id}]
    except TetherError as exc:  # the model failed (or wrote calls that could not be used)
        return ["failed", f"the agent's model failed: {exc.message}", {"thread_id": thread_id}]
    data = {"thread_id": thread_id, "final": result.final, "steps": len(result.steps)}
    status = result.status.value
    done, refused = _evidence(result.steps)
    if refused is not None:
        # What the tool answered is the diagnostics, not what the model then said about it.
        data["refused"] = refused
    if status == "completed":
        if not done:
            # A task is work: a turn that ran no tool for it did not do it, whatever it says.
            why = f"the agent ran no tool for this task (it answered: {clip(result.final, 300)})"
            return ["failed", why, data]
        return ["completed", result.final, {**data, "done": done}]
    if result.final == TIMED_OUT:
        return ["stopped", "timed out", data]
    if status == "needs_confirmation":
        return ["rejected", f"the agent asks for a person's confirmation: {result.final}", data]
    if refused is not None:
        return ["failed", f"{refused['task_id']} {refused['status']}: {refused['message']}", data]
    return ["failed", result.final, data]


def _flows(h: Host) -> Any:
    """What starts a skill's flow for an agent of this executor (``skills.run``)."""
    from functools import partial

    from tether.supervisor.skillflows import start_skill_flow

    return partial(start_skill_flow, h.runtime, h.executor.registry)


def _agent_session(h: Host, opened: dict[str, Any], steps: DurableSteps, shape: dict[str, Any]) -> Any:
    """The session of an agent task: the profile's agent as its turn recorded it (its persona, model
    and grants; the profile's own prompt and model, when given, win), else a plain session for the
    profile's caller."""
    from dataclasses import replace

    from tether.agent.session import ConversationSession

    assert h.model_for is not None
    persona, model = str(opened.get("persona") or ""), opened.get("model")
    within = Grants.from_json(opened.get("grants"))  # the run's (a skill's flow an agent started)
    if opened.get("agent"):
        team = team_of(h.executor, h.model_for, start_flow=_flows(h))
        record = AgentRecord.from_dict(shape["agent"])
        record = replace(record, persona=persona or record.persona, model=model or record.model)
        return session_for(
            team, record, steps=steps, detach=True, caller=str(opened["caller"]), within=within,
            lineage=lineage_of(opened, record.name, within), flows=shape["flows"],
        )  # fmt: skip
    return ConversationSession(
        h.executor,
        h.model_for(model),
        caller=str(opened["caller"]),
        detach=True,
        steps=steps,
        persona=persona,
        grants=within,
    )


def _evidence(steps: Sequence[StepRecord]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The business calls of a turn that did their work (completed, or started in the background), and
    the last one that did not (its tool's own answer)."""
    done: list[dict[str, Any]] = []
    refused: dict[str, Any] | None = None
    for step in steps:
        if step.kind != "tool" or step.result is None or ToolSurface.is_control(step.tool or ""):
            continue
        status = str(step.result.get("status", ""))
        summary = {
            "task_id": step.tool,
            "status": status,
            "message": clip(str(step.result.get("message", "")), 500),
            "execution_id": step.execution_id,
        }
        if status in ("completed", "running"):
            done.append(summary)
        elif status != "skipped":
            refused = summary
    return done, refused
