"""The decider's rules in both languages, its model path, its guards, and that it never raises; quiet
hours, and the outbox holding a notification through them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.agent.decider import KINDS, Signal, decide, weigh
from tether.testing import ScriptedModel, say

SHANGHAI = timezone(timedelta(hours=8))


@pytest.mark.parametrize(
    ("kind", "text", "data", "fires", "category"),
    [
        ("outside", "the nightly backup failed: disk full", {}, True, "alert"),
        ("outside", "服务器宕机了", {}, True, "alert"),
        ("message", "账号被封了，快看看", {}, True, "alert"),
        ("outside", "no errors in the last run, all checks passed", {}, False, "info"),
        ("outside", "本次巡检无异常", {}, False, "info"),
        ("outside", "heartbeat: nothing new", {}, False, "none"),
        ("outside", "心跳正常，无变化", {}, False, "none"),
        ("outside", "the invoice is due on Friday", {}, True, "reminder"),
        ("outside", "开拓力已满，记得清体力", {}, True, "reminder"),
        ("outside", "a new blog post was published", {}, False, "info"),
        ("outside", "a new blog post was published", {"priority": "urgent"}, True, "info"),
        ("file", "notes/todo.md changed", {"path": "notes/todo.md"}, False, "info"),
        ("message", "lunch on Friday?", {}, False, "info"),
        ("ended", "", {"status": "failed", "task": "backup", "duration_s": 3}, True, "alert"),
        ("ended", "", {"status": "completed", "task": "render", "duration_s": 600}, True, "done"),
        ("ended", "", {"status": "completed", "task": "ls", "duration_s": 0.4}, False, "none"),
        ("ended", "", {"status": "cancelled", "task": "farm", "duration_s": 900}, False, "none"),
        ("schedule", "water the plants", {"action": "remind"}, True, "reminder"),
        ("schedule", "", {"action": "report"}, True, "report"),
        ("schedule", "", {"action": "dance"}, False, "none"),
    ],
)
def test_the_rules_in_both_languages(
    kind: str, text: str, data: dict[str, Any], fires: bool, category: str
) -> None:
    signal = Signal(kind=kind, text=text, data=data)  # type: ignore[arg-type]
    decision = asyncio.run(decide(signal, threshold=0.5))
    assert (decision.fire, decision.category) == (fires, category), decision
    assert decision.reason and decision.by == "rules"


def test_the_model_weighs_what_the_rules_find_close_and_a_failing_model_leaves_the_rules() -> None:
    signal = Signal(kind="message", text="Anna asks whether the report can wait until Monday")
    assert weigh(signal)[0] == 0.35  # close to 0.5: the model is asked
    model = ScriptedModel(
        [say('{"fire": true, "category": "info", "score": 0.7, "reason": "Anna waits for an answer"}')]
    )
    decision = asyncio.run(decide(signal, threshold=0.5, model=model))
    assert decision.fire and decision.by == "model" and "Anna waits" in decision.reason
    broken = ScriptedModel([say("I think you should tell them!")])
    decision = asyncio.run(decide(signal, threshold=0.5, model=broken))
    assert not decision.fire and decision.by == "rules"
    failing = ScriptedModel([])  # asked once more than scripted: it raises
    decision = asyncio.run(decide(signal, threshold=0.5, model=failing))
    assert not decision.fire and "could not be asked" in decision.reason
    far = Signal(kind="outside", text="the database is down")  # 0.8: the rules are sure, no model asked
    assert asyncio.run(decide(far, threshold=0.5, model=ScriptedModel([]))).by == "rules"


def test_the_guards_only_ever_silence() -> None:
    alert = Signal(kind="outside", text="the database is down")
    said = asyncio.run(
        decide(
            alert,
            threshold=0.5,
            message="⚠ the database is down",
            posted_recently=["⚠ The database is DOWN!"],
        )
    )
    assert not said.fire and said.by == "guard" and "said the same" in said.reason
    busy = asyncio.run(decide(alert, threshold=0.5, message="x", posted_last_hour=3, max_per_hour=3))
    assert not busy.fire and "in the last hour" in busy.reason
    asked = Signal(kind="schedule", text="stretch", data={"action": "remind"})
    assert asyncio.run(decide(asked, threshold=0.5, message="", posted_last_hour=99, max_per_hour=3)).fire


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    text=st.text(max_size=300),
    data=st.dictionaries(
        st.sampled_from(["status", "duration_s", "task", "action", "priority", "path", "x"]),
        st.one_of(
            st.none(),
            st.text(max_size=20),
            st.floats(allow_nan=True),
            st.integers(),
            st.lists(st.integers(), max_size=3),
        ),
        max_size=5,
    ),
    threshold=st.floats(min_value=0.3, max_value=0.95),
)
def test_the_decider_never_raises(kind: str, text: str, data: dict[str, Any], threshold: float) -> None:
    signal = Signal(kind=kind, text=text, data=data)  # type: ignore[arg-type]
    decision = asyncio.run(decide(signal, threshold=threshold, message=text, posted_recently=[text[:5]]))
    assert 0.0 <= decision.score <= 1.0 and decision.reason and decision.category


def test_quiet_hours_end_when_they_say() -> None:
    from tether.supervisor.notify import quiet_until

    at = datetime(2026, 12, 5, 23, 30, tzinfo=SHANGHAI)
    assert quiet_until("22:00-07:00", at) == 7.5 * 3600
    assert quiet_until("22:00-07:00", datetime(2026, 12, 5, 6, 0, tzinfo=SHANGHAI)) == 3600
    assert quiet_until("22:00-07:00", datetime(2026, 12, 5, 12, 0, tzinfo=SHANGHAI)) is None
    assert quiet_until("13:00-14:00", datetime(2026, 12, 5, 13, 15, tzinfo=SHANGHAI)) == 45 * 60
    assert quiet_until("", at) is None


def test_the_outbox_holds_a_notification_through_quiet_hours(home: Path) -> None:
    from tether.config import InitiativeSettings
    from tether.runtime import Runtime
    from tether.supervisor.notify import send_due

    with Runtime.open(home) as runtime:
        runtime.notifications.add_channel("phone", "tgram", ("approval",))
        assert runtime.notifications.queue("phone", "approval", "event:1", "Waiting", "demo.salvage_relics")
        assert not runtime.notifications.queue(
            "phone", "approval", "event:1", "Waiting", "again"
        )  # one per source
        night = datetime(2026, 12, 5, 23, 30, tzinfo=SHANGHAI)
        assert send_due(runtime, InitiativeSettings(quiet_hours="22:00-07:00"), now=night) == 0
        held = runtime.notifications.notifications()[0]
        assert held.status == "pending" and held.attempts == 0 and held.error == "quiet hours"
        assert held.next_at > datetime.now(UTC).isoformat()
        assert runtime.notifications.due() == []  # not due again before the morning


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    text=st.text(max_size=80),
    status=st.sampled_from(["completed", "failed", "stopped", "unknown"]),
    duration=st.floats(min_value=0, max_value=100_000),
    threshold=st.floats(min_value=0.3, max_value=0.95),
    posted=st.lists(st.text(max_size=30), max_size=4),
    with_model=st.booleans(),
)
def test_a_signal_that_cannot_fire_is_decided_the_same_without_what_the_guards_read(
    kind: str, text: str, status: str, duration: float, threshold: float, posted: list[str], with_model: bool
) -> None:
    """``consider`` reads the messages posted lately only when ``could_fire``: where it says no, the
    decision is the same whatever they are, and it never fires."""
    from tether.agent.decider import could_fire

    signal = Signal(kind=kind, text=text, data={"status": status, "duration_s": duration, "task": text})  # type: ignore[arg-type]
    # A model that would say "fire" if it were asked: where could_fire says no, it is not.
    eager = '{"fire": true, "category": "alert", "score": 1.0, "reason": "asked"}'
    model = ScriptedModel([say(eager), say(eager)]) if with_model else None
    if could_fire(signal, threshold, model=model):
        return
    told = asyncio.run(
        decide(
            signal, threshold=threshold, message=text, posted_last_hour=9, posted_recently=posted, model=model
        )
    )
    blind = asyncio.run(decide(signal, threshold=threshold, model=model))
    assert not told.fire and told == blind
