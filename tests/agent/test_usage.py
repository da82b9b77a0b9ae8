"""Every model call of a turn is on record with its step: model, provider, tokens, duration and finish
reason; a replayed step records nothing twice; a service that reports no tokens is "not reported", never
0; ``tether trace`` shows each call and each turn's totals (a real CLI process reading the home)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.support.helpers import tether_cli
from tether.agent.session import ConversationSession
from tether.agent.steps import StepWork
from tether.agent.usage import Totals, describe, turn_totals
from tether.config import AgentSettings
from tether.events import ModelDecided
from tether.execution.executor import Executor
from tether.models.offline import OfflineModel
from tether.testing import ScriptedModel, call, calls, say


def model_calls(result: Any) -> list[dict[str, Any]]:
    return [c for s in result.steps if s.kind == "model" for c in (s.result or {})["model_calls"]]


def without_time(record: dict[str, Any]) -> dict[str, Any]:
    assert isinstance(record["duration_s"], float) and record["duration_s"] >= 0
    return {k: v for k, v in record.items() if k != "duration_s"}


def test_every_model_step_records_its_model_tokens_duration_and_finish_reason(
    running_game: Executor,
) -> None:
    model = ScriptedModel([
        calls(call("demo__daily_training"), usage=(812, 41)),
        say("Done: the dailies are trained.", usage=(905, 17)),
    ])  # fmt: skip
    session = ConversationSession(running_game, model, settings=AgentSettings())
    decided: list[ModelDecided] = []
    session.events.subscribe(lambda e: decided.append(e) if isinstance(e, ModelDecided) else None)
    result = session.send_sync("t", "do the dailies")
    model.assert_consumed()
    recorded = model_calls(result)
    assert [without_time(c) for c in recorded] == [
        {"model": "scripted", "provider": "scripted", "input_tokens": 812, "output_tokens": 41,
         "finish_reason": None},
        {"model": "scripted", "provider": "scripted", "input_tokens": 905, "output_tokens": 17,
         "finish_reason": None},
    ]  # fmt: skip
    # The events carry the same record the store keeps (what the page shows while the turn runs).
    assert [e.call for e in decided] == recorded
    # … and the store has it, whatever exporter is set (none here).
    stored = [s.result for s in running_game.runtime.threads.steps("t") if s.kind == "model"]
    assert [r["model_calls"][0] for r in stored if r] == recorded
    totals = turn_totals(running_game.runtime.threads, "t")[1]
    assert (totals.calls, totals.reported, totals.input_tokens, totals.output_tokens) == (2, 2, 1717, 58)
    assert describe(totals).startswith("2 model calls · 1,717 in / 58 out tokens · ")
    assert describe(totals, zh=True).startswith("2 次模型调用 · 输入 1,717 / 输出 58 词元 · ")


def test_a_model_that_reports_no_usage_is_not_reported_never_zero(running_game: Executor) -> None:
    session = ConversationSession(running_game, OfflineModel(), settings=AgentSettings())
    result = session.send_sync("t", "start the game")
    (first, *_) = model_calls(result)
    assert first["model"] == "offline" and first["provider"] == "offline"
    assert first["input_tokens"] is None and first["output_tokens"] is None
    totals = turn_totals(running_game.runtime.threads, "t")[1]
    assert totals.to_dict()["input_tokens"] is None and totals.reported == 0
    assert "tokens not reported" in describe(totals)
    # Part reported, part not: the sum says how much of it is known.
    mixed = Totals()
    mixed.add_call({"input_tokens": 10, "output_tokens": 2, "duration_s": 0.5})
    mixed.add_call({"input_tokens": None, "output_tokens": None, "duration_s": 0.25})
    assert describe(mixed) == "2 model calls · 10 in / 2 out tokens (1 of 2 reported) · 0.8 s"


class Recording:
    """Steps that keep what each step returned, then (``replay``) return it again without running it:
    what DBOS does for a turn recovered after a crash."""

    durable = True

    def __init__(self) -> None:
        self.outputs: list[dict[str, Any]] = []
        self.replaying = False

    async def __call__(self, kind: str, work: StepWork) -> dict[str, Any]:
        if self.replaying:
            return self.outputs.pop(0)
        out = await work()
        self.outputs.append(out)
        return out

    async def delegate(self, payload: dict[str, Any], team: Any) -> dict[str, Any]:
        raise AssertionError("no delegation here")


def test_a_replayed_turn_records_its_model_calls_once(running_game: Executor) -> None:
    steps = Recording()
    model = ScriptedModel([calls(call("demo__daily_training"), usage=(100, 10)), say("done", usage=(120, 5))])
    first = ConversationSession(running_game, model, settings=AgentSettings(), steps=steps)
    asyncio.run(first.send("t", "do the dailies"))
    threads = running_game.runtime.threads
    before = [s.to_dict() for s in threads.steps("t")]
    events_before = len(running_game.runtime.events.read(topics=["thread:t"]))
    # The same turn replayed from its steps' record: no model is asked, nothing is recorded again.
    steps.replaying = True
    again = ConversationSession(running_game, ScriptedModel([]), settings=AgentSettings(), steps=steps)
    asyncio.run(again.send("t", "do the dailies"))
    assert [s.to_dict() for s in threads.steps("t")] == before
    assert len(running_game.runtime.events.read(topics=["thread:t"])) == events_before
    totals = turn_totals(threads, "t")[1]
    assert (totals.calls, totals.input_tokens, totals.output_tokens) == (2, 220, 15)


def test_trace_prints_each_calls_cost_and_each_turns_totals(running_game: Executor, home: Path) -> None:
    model = ScriptedModel([
        calls(call("demo__daily_training"), usage=(812, 41)),
        say("Trained.", usage=(905, 17)),
        say("Nothing else to do.", usage=(300, 9)),
    ])  # fmt: skip
    session = ConversationSession(running_game, model, settings=AgentSettings())
    session.send_sync("t", "do the dailies")
    session.send_sync("t", "anything else?")
    code, out, err = tether_cli("trace", "t", home=home, COLUMNS="200")
    assert code == 0, err
    assert "[scripted · 812 in / 41 out tokens · " in out
    assert "Σ turn 1: 2 model calls · 1,717 in / 58 out tokens · " in out
    assert "Σ turn 2: 1 model call · 300 in / 9 out tokens · " in out
    assert "Σ all turns: 3 model calls · 2,017 in / 67 out tokens · " in out
    code, out, err = tether_cli("trace", "t", "--json", home=home)
    assert code == 0, err
    usage = json.loads(out)["usage"]
    assert [(u["turn"], u["model_calls"], u["input_tokens"], u["output_tokens"]) for u in usage["turns"]] == [
        (1, 2, 1717, 58),
        (2, 1, 300, 9),
    ]
    assert usage["total"]["input_tokens"] == 2017 and usage["total"]["reported_calls"] == 3
