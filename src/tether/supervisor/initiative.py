"""Initiative: a signal in, a recorded decision out, and — when it fires — a proactive message in the
agent's notices thread (``notices-<agent>``), told on the event log (``ProactivePosted``) in the same
transaction, from where notifications reach the person.

``consider`` is the one way in: the executors' event watcher (runs and background jobs that ended), the
schedules' workflow (a tick), ``tether signal`` and ``POST /api/signals`` (outside information, a
message, a changed file) all call it. A keyed signal is decided once, however many executors see it or
however often a crashed step is replayed; a decision is recorded with its inputs whether it fires or not,
so "why did it (not) speak" always has an answer (``tether initiative list``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tether.agent.decider import REPEAT_H, Signal, could_fire, decide, uses_model
from tether.config import InitiativeSettings
from tether.events import ProactivePosted
from tether.runtime import Runtime
from tether.store.initiative import DecisionRecord
from tether.supervisor import report

log = logging.getLogger("tether.initiative")
POST_TRIES = 20  # a thread busy with a turn is tried again, this many times, POST_WAIT_S apart
POST_WAIT_S = 0.5

# Marks every common font draws (an emoji font is often missing on Linux: a box is worse than none).
_LEAD = {
    "en": {"alert": "⚠ ", "reminder": "", "done": "✓ ", "info": "", "report": "", "none": ""},
    "zh": {"alert": "⚠ ", "reminder": "", "done": "✓ ", "info": "", "report": "", "none": ""},
}
_ENDED = {
    "en": {"alert": "{what} ended {status}{why}.", "done": "{what} finished ({status}) after {took}."},
    "zh": {"alert": "{what} 以 {status} 结束{why}。", "done": "{what} 已完成（{status}），用时 {took}。"},
}


@dataclass
class Weighing:
    """What a pass over several signals reads once (the notify loop's): the decisions their keys have
    already, and each agent's record and threshold as the pass found them (a rating made while a pass
    posts counts from the next pass on)."""

    decided: dict[str, DecisionRecord] = field(default_factory=dict)
    agents: dict[str, tuple[Any, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, runtime: Runtime, keys: list[str]) -> Weighing:
        return cls(decided=runtime.initiative.by_keys(keys))


def _agent(runtime: Runtime, name: str, default: float) -> tuple[Any, float]:
    """An agent's record (None: not on record) and its threshold."""
    return runtime.agents.get(name), runtime.initiative.threshold(name, default)


def notices_thread(agent: str) -> str:
    return f"notices-{agent}"


def _ago(hours: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours)).isoformat(timespec="microseconds")


def _took(seconds: Any) -> str:
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "?"
    return f"{s / 60:.0f} min" if s >= 120 else f"{s:.0f} s"


def decider_model(runtime: Runtime, model_for: Any, agent: str) -> Any:
    """The model that weighs ``agent``'s signals and leads its reports: its own (``model_for`` by
    name), unless that is the offline one (whose rules the decider's rules already are) or none."""
    if model_for is None:
        return None
    return _model_of(runtime.agents.get(agent), model_for, agent)


def _model_of(record: Any, model_for: Any, agent: str) -> Any:
    try:
        model = model_for(record.model if record is not None else None)
    except Exception:  # a model that cannot be made: the rules decide alone
        log.warning("no model for %s's signals", agent, exc_info=True)
        return None
    return None if getattr(model, "name", "") == "offline" else model


def compose(runtime: Runtime, signal: Signal, category: str, language: str) -> str:
    """What the agent would say about ``signal``: the person's words for schedules and outside news,
    the record for ended work, the extracted report for a report."""
    lead = _LEAD.get(language, _LEAD["en"]).get(category, "")
    if signal.kind == "schedule" and signal.data.get("action") == "report":
        return report.extract(report.gather(runtime), language)
    if signal.kind == "ended" and category in ("alert", "done"):
        data = signal.data
        why = f": {data['message']}" if data.get("message") else ""
        what = str(data.get("task") or signal.source or "work")
        words = _ENDED.get(language, _ENDED["en"])[category]
        return lead + words.format(what=what, status=data.get("status", ""), why=why[:200],
                                   took=_took(data.get("duration_s")))  # fmt: skip
    source = f"{signal.source}: " if signal.source and signal.kind != "schedule" else ""
    return lead + source + signal.text.strip()


async def consider(
    runtime: Runtime,
    signal: Signal,
    *,
    model: Any = None,
    model_for: Any = None,
    settings: InitiativeSettings | None = None,
    weighing: Weighing | None = None,
) -> DecisionRecord:
    """Decide ``signal`` for its agent, record the decision, and post the message when it fires.
    ``model_for``: without ``model``, the agent's own (``decider_model``), made only for a signal not
    decided yet that a model may have a say in (``uses_model``). A signal decided before (its key)
    reads nothing more; one the rules keep under the threshold with no model to ask reads no posted
    messages for the guards. ``weighing``: a pass over several signals, which read their keys'
    decisions together beforehand and reads each agent once."""
    settings = settings or InitiativeSettings.load(runtime.home)
    store = runtime.initiative
    if signal.key is not None:
        if weighing is not None:
            known = weighing.decided.get(signal.key)
        else:
            known = await asyncio.to_thread(store.by_key, signal.key)
        if known is not None:
            return known
    found = weighing.agents.get(signal.agent) if weighing is not None else None
    if found is None:
        found = await asyncio.to_thread(_agent, runtime, signal.agent, settings.threshold)
        if weighing is not None:
            weighing.agents[signal.agent] = found
    agent, threshold = found
    if model is None and model_for is not None and uses_model(signal):
        model = await asyncio.to_thread(_model_of, agent, model_for, signal.agent)
    language = (
        agent.language if agent is not None and agent.language else None
    ) or runtime.agent_settings.language
    recent: list[str] = []
    last_hour: list[str] = []
    message = ""
    if could_fire(signal, threshold, model=model, long_s=settings.long_job_s):
        recent = await asyncio.to_thread(store.posted_since, signal.agent, _ago(REPEAT_H))
        last_hour = await asyncio.to_thread(store.posted_since, signal.agent, _ago(1.0))
        # What would be said, for the repeat guard (a schedule's reminders repeat on purpose).
        if signal.kind != "schedule":
            message = await asyncio.to_thread(compose, runtime, signal, "info", language)
    decision = await decide(
        signal, threshold=threshold, message=message,
        posted_last_hour=len(last_hour), max_per_hour=settings.max_per_hour, posted_recently=recent,
        model=model, long_s=settings.long_job_s,
    )  # fmt: skip
    if not settings.enabled and decision.fire:
        decision = replace(
            decision, fire=False, by="guard", reason="initiative is off ([initiative] enabled)"
        )
    record, new = await asyncio.to_thread(
        store.record, agent=signal.agent, signal_key=signal.key, kind=signal.kind,
        signal=signal.model_dump(mode="json"), fired=decision.fire, category=decision.category,
        score=decision.score, threshold=threshold, reason=decision.reason, decided_by=decision.by,
    )  # fmt: skip
    if not new or not record.fired:
        return record
    said = await asyncio.to_thread(compose, runtime, signal, decision.category, language)
    if signal.kind == "schedule" and signal.data.get("action") == "report" and model is not None:
        said = await report.summarize(model, said, language)
    return await post(runtime, record, said, language)


async def post(runtime: Runtime, record: DecisionRecord, said: str, language: str) -> DecisionRecord:
    """Post ``said`` for a fired decision in its agent's notices thread, and link the two."""
    thread_id = notices_thread(record.agent)
    title = f"{record.agent} 的消息" if language == "zh" else f"{record.agent} · notices"

    def event(turn: int) -> ProactivePosted:
        return ProactivePosted(
            topic=f"thread:{thread_id}", thread_id=thread_id, turn=turn, agent=record.agent, text=said,
            category=record.category, decision_id=record.decision_id,
        )  # fmt: skip

    # The decision carries its message before the message's event is out: a page that reloads its notices
    # on that event shows the message, not an empty notice (it read the decision between two writes).
    await asyncio.to_thread(runtime.initiative.attach, record.decision_id, thread_id, None, said)
    for _ in range(POST_TRIES):
        turn = await asyncio.to_thread(runtime.threads.post, thread_id, record.agent, said, title, event)
        if turn is not None:
            await asyncio.to_thread(runtime.initiative.attach, record.decision_id, thread_id, turn, said)
            return runtime.initiative.get(record.decision_id) or record
        await asyncio.sleep(POST_WAIT_S)  # the person is in a turn there: the message waits for its end
    await asyncio.to_thread(runtime.initiative.attach, record.decision_id, None, None, None)  # never said
    return record
