"""The loop's contracts, with ScriptedModel and the real executor on the demo game."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tether.agent.session import ConversationSession
from tether.config import AgentSettings
from tether.errors import ConfigError
from tether.execution.executor import Executor
from tether.store.threads import MemoryThreadStore
from tether.tasks.result import TaskStatus
from tether.testing import ScriptedModel, UnexpectedModelCall, call, calls, say
from tether.toolkits.demo import game

GOLD = {"instance_type": "拟造花萼（金）", "instance_name": "藏珍之蕾"}


def session(executor: Executor, model: Any, **settings: Any) -> ConversationSession:
    return ConversationSession(executor, model, settings=AgentSettings(**settings))


def tool_steps(result: Any) -> list[tuple[Any, Any]]:
    return [(s.tool, (s.result or {}).get("status")) for s in result.steps if s.kind == "tool"]


def tool_results(result: Any) -> list[dict[str, Any]]:
    return [s.result for s in result.steps if s.kind == "tool"]


def test_parallel_calls_run_serially_and_are_cut_at_the_first_failure(
    running_game: Executor, home: Path
) -> None:
    model = ScriptedModel([
        calls(
            call("demo__farm_instance", {**GOLD, "attempts": 1}, id="a"),
            call("demo__farm_instance", {**GOLD, "instance_name": "金币"}, id="b"),  # rejected: an alias
            call("demo__daily_training", id="c"),  # never runs
        ),
        say("The second call was rejected: 金币 is an alias of 藏珍之蕾."),
    ])  # fmt: skip
    result = session(running_game, model).send_sync("t", "farm twice then dailies")
    model.assert_consumed()
    assert tool_steps(result) == [
        ("demo.farm_instance", "completed"),
        ("demo.farm_instance", "rejected"),
        ("demo.daily_training", "skipped"),
    ]
    assert game.load_state(home)["daily_training_total"] == 0
    assert game.load_state(home)["farm_attempts_total"] == 1
    # Every call got an answer the model can see, in order.
    answered = [m for m in model.requests[1][0] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answered] == ["a", "b", "c"]


def test_no_business_call_after_a_rejection_only_control_tools(running_game: Executor, home: Path) -> None:
    model = ScriptedModel([
        calls(call("demo__salvage_relics", {"rarity": 5})),  # rejected: 5 is not allowed
        calls(call("demo__daily_training")),  # the model tries anyway
    ])  # fmt: skip
    result = session(running_game, model).send_sync("t", "salvage 5-star relics")
    model.assert_consumed()
    assert tool_steps(result) == [("demo.salvage_relics", "rejected"), ("demo.daily_training", "skipped")]
    assert result.status == "failed" and "rejected" in result.final  # the work was not done
    assert game.load_state(home)["daily_training_total"] == 0


def test_control_tools_still_work_after_a_failure(running_game: Executor) -> None:
    job = running_game.execute_sync("demo.loop_farm", caller="agent", origin="thread:t")
    model = ScriptedModel([
        calls(call("demo__daily_training")),  # rejected: automation is busy
        calls(call("stop_task", {"execution_id": job.execution_id})),
        say("Stopped the loop."),
    ])  # fmt: skip
    result = session(running_game, model).send_sync("t", "dailies")
    model.assert_consumed()
    assert tool_steps(result) == [("demo.daily_training", "rejected"), ("stop_task", "stopped")]


def test_destructive_call_waits_for_the_persons_reply(running_game: Executor, home: Path) -> None:
    model = ScriptedModel([
        calls(call("demo__salvage_relics", {"rarity": 4})),
        say("Salvaged 2 relics."),
    ])  # fmt: skip
    s = session(running_game, model)
    asked = s.send_sync("t", "salvage my 4-star relics")
    assert asked.status == "needs_confirmation" and "confirm" in asked.final
    assert game.load_state(home)["salvaged_total"] == 0
    assert model.remaining == 1  # nothing else was asked of the model

    done = s.send_sync("t", "yes")
    model.assert_consumed()
    assert tool_steps(done) == [("demo.salvage_relics", "completed")]
    assert game.load_state(home)["salvaged_total"] == 2


def test_a_declined_confirmation_runs_nothing(running_game: Executor, home: Path) -> None:
    model = ScriptedModel([calls(call("demo__salvage_relics", {"rarity": 4})), say("OK, I will not.")])
    s = session(running_game, model)
    assert s.send_sync("t", "salvage 4-star").status == "needs_confirmation"
    declined = s.send_sync("t", "不要")
    model.assert_consumed()
    assert tool_steps(declined) == []
    assert game.load_state(home)["salvaged_total"] == 0


def test_the_model_cannot_confirm_for_the_person(running_game: Executor, home: Path) -> None:
    """Even if the model passes confirmed=True as an argument, nothing destructive runs."""
    model = ScriptedModel(
        [calls(call("demo__salvage_relics", {"rarity": 4, "confirmed": True})), say("sorry")]
    )
    result = session(running_game, model).send_sync("t", "salvage")
    assert tool_steps(result) == [("demo.salvage_relics", "rejected")]
    step = next(s for s in result.steps if s.kind == "tool")
    assert step.result is not None and "'confirmed'" in step.result["message"]
    assert game.load_state(home)["salvaged_total"] == 0


def test_an_explicit_confirmation_runs_exactly_the_waiting_call(running_game: Executor, home: Path) -> None:
    model = ScriptedModel([calls(call("demo__salvage_relics", {"rarity": 3})), say("done")])
    s = ConversationSession(running_game, model)
    asked = s.send_sync("t", "salvage 3-star")
    assert asked.status == "needs_confirmation" and s.pending("t") is not None
    done = asyncio.run(s.confirm("t", source="person:test"))
    assert tool_steps(done) == [("demo.salvage_relics", "completed")]
    assert game.load_state(home)["salvaged_total"] == 5
    assert s.pending("t") is None
    record = running_game.jobs.record(tool_results(done)[0]["execution_id"])
    assert record.confirmed_by == "person:test" and record.origin == "thread:t"
    with pytest.raises(ConfigError, match="not waiting"):
        asyncio.run(s.confirm("t"))  # a confirmation is used once; nothing waits any more


def test_a_confirmation_for_a_question_that_is_no_longer_waiting_runs_nothing(
    running_game: Executor, home: Path
) -> None:
    """An answer bound to a question's id (as a handed-over `--confirm` is) confirms only that question:
    when another one waits by the time it runs, nothing runs and the waiting question stays."""
    model = ScriptedModel([calls(call("demo__salvage_relics", {"rarity": 3})), say("done")])
    s = ConversationSession(running_game, model)
    assert s.send_sync("t", "salvage 3-star").status == "needs_confirmation"
    waiting = s.pending("t")
    assert waiting is not None
    with pytest.raises(ConfigError, match="another question"):
        asyncio.run(s.confirm("t", source="person:test", pending_id="t:0:1"))
    assert s.pending("t") == waiting and game.load_state(home).get("salvaged_total", 0) == 0
    done = asyncio.run(s.confirm("t", source="person:test", pending_id=waiting["id"]))
    assert tool_steps(done) == [("demo.salvage_relics", "completed")]


def test_a_confirmation_covers_one_call_and_every_other_call_asks_again(
    running_game: Executor, home: Path
) -> None:
    """The audit's case: consent to one salvage never lets the model pick another destructive call."""
    model = ScriptedModel([
        calls(call("demo__salvage_relics", {"rarity": 4})),
        # After the confirmed call ran, the model goes for more on its own initiative.
        calls(call("demo__salvage_relics", {"rarity": 3})),
    ])  # fmt: skip
    s = ConversationSession(running_game, model)
    assert s.send_sync("t", "salvage my 4-star relics").status == "needs_confirmation"
    again = s.send_sync("t", "yes")
    model.assert_consumed()
    assert tool_steps(again) == [("demo.salvage_relics", "completed")]
    assert again.status == "needs_confirmation" and s.pending("t")["args"] == {"rarity": 3}  # type: ignore[index]
    assert game.load_state(home)["salvaged_total"] == 2  # only the one that was confirmed


def test_an_answer_that_says_the_request_cannot_be_done_ends_the_turn_failed(executor: Executor) -> None:
    """A refusal is not the work done: the turn says failed (`tether run` exits 1), not completed."""
    from tether.models.base import UNABLE

    model = ScriptedModel([say("I cannot search the web here: no search is set up.", finish_reason=UNABLE)])
    refused = ConversationSession(executor, model).send_sync("t", "search the web for solar power")
    assert refused.status == "failed" and "cannot search" in refused.final
    answered = ConversationSession(executor, ScriptedModel([say("I can farm and train.")])).send_sync(
        "t", "what can you do?"
    )
    assert answered.status == "completed"


def test_a_yes_without_a_question_confirms_nothing(running_game: Executor, home: Path) -> None:
    model = ScriptedModel([calls(call("demo__salvage_relics", {"rarity": 4})), say("I need your consent.")])
    s = ConversationSession(running_game, model)
    result = s.send_sync("t", "yes")  # nothing waits: a bare "yes" is just a message
    assert result.status == "needs_confirmation"
    assert game.load_state(home)["salvaged_total"] == 0


def test_caution_tasks_ask_a_model_caller_but_not_a_person_at_the_terminal(running_game: Executor) -> None:
    model = ScriptedModel([calls(call("demo__exit_game")), say("closed")])
    s = ConversationSession(running_game, model)
    asked = s.send_sync("t", "close the game")
    assert asked.status == "needs_confirmation" and "caution" in asked.final
    assert running_game.execute_sync("demo.status", caller="agent").data["running"] is True
    closed = s.send_sync("t", "是")
    assert tool_steps(closed) == [("demo.exit_game", "completed")]
    # A person typing the command needs no extra step: the command is the consent.
    assert running_game.execute_sync("demo.start_game", caller="cli").status is TaskStatus.COMPLETED
    direct = running_game.execute_sync("demo.exit_game", caller="cli")
    assert direct.status is TaskStatus.COMPLETED
    assert running_game.jobs.record(direct.execution_id).confirmed_by == "direct:cli"


def test_budget_escalation_extends_then_hits_the_ceiling(running_game: Executor) -> None:
    status = [calls(call("demo__status")) for _ in range(6)]
    manager = ScriptedModel([say('{"extend": 2}'), say('{"extend": 5}')])
    model = ScriptedModel(status)
    s = ConversationSession(
        running_game, model, manager=manager,
        settings=AgentSettings(max_steps=2, extend_by=2, max_steps_ceiling=6),
    )  # fmt: skip
    result = s.send_sync("t", "status forever")
    assert result.status == "budget_exhausted"
    budget = [step for step in result.steps if step.kind == "budget"]
    assert [(b.result or {})["extend"] for b in budget] == [2, 2, 0]
    assert len([s for s in result.steps if s.kind == "model"]) == 6  # the ceiling holds
    manager.assert_consumed()
    model.assert_consumed()


def test_manager_can_stop_the_turn(running_game: Executor) -> None:
    manager = ScriptedModel([say('{"stop": "no progress"}')])
    model = ScriptedModel([calls(call("demo__status"))])
    s = ConversationSession(running_game, model, manager=manager, settings=AgentSettings(max_steps=1))
    result = s.send_sync("t", "status")
    assert result.status == "budget_exhausted"
    assert [st.text for st in result.steps if st.kind == "budget"] == ["no progress"]


def test_unknown_tool_and_bad_arguments_are_observations_not_crashes(running_game: Executor) -> None:
    from tether.models.base import ModelResponse, ToolCall

    model = ScriptedModel([
        calls(call("demo__debug_crash")),  # not exposed to the agent
        say("That tool does not exist for me."),
        ModelResponse(tool_calls=(ToolCall(id="x", name="demo__status", arguments={}, error="not JSON"),)),
        say("My arguments were broken."),
    ])  # fmt: skip
    s = session(running_game, model)
    assert tool_steps(s.send_sync("t", "crash it")) == [("demo.debug_crash", "not_found")]
    assert tool_steps(s.send_sync("t", "status")) == [("demo.status", "rejected")]
    model.assert_consumed()


def test_unexpected_model_calls_fail_the_test(running_game: Executor) -> None:
    model = ScriptedModel([calls(call("demo__status"))])
    with pytest.raises(UnexpectedModelCall):
        session(running_game, model).send_sync("t", "status")


def test_every_step_is_stored_with_deterministic_ids(running_game: Executor, home: Path) -> None:
    model = ScriptedModel([calls(call("demo__status")), say("all good")])
    s = session(running_game, model)
    s.send_sync("thread-1", "status?")
    steps = running_game.runtime.threads.steps("thread-1")
    assert [st.step_id for st in steps] == ["thread-1:1:0", "thread-1:1:1", "thread-1:1:2", "thread-1:1:3"]
    assert [st.kind for st in steps] == ["model", "tool", "model", "final"]
    assert steps[1].result is not None and steps[1].result["status"] == "completed"


def test_every_step_is_a_typed_event_live_and_on_record(running_game: Executor) -> None:
    model = ScriptedModel([calls(call("demo__status")), say("ok")])
    s = session(running_game, model)
    seen: list[str] = []
    s.events.subscribe(lambda e: seen.append(e.kind))
    s.send_sync("t", "status")
    expected = [
        "turn_started",
        "model_decided",
        "tool_started",
        "tool_finished",
        "model_decided",
        "turn_finished",
    ]
    assert seen == expected
    on_record = running_game.runtime.events.read(topics=["thread:t"])
    # The same events, in order, plus the job's own state changes (it was started by this thread).
    assert [e.kind for e in on_record if e.kind != "job_state_changed"] == expected
    assert [e.id for e in on_record] == sorted(e.id for e in on_record)
    assert "job_state_changed" in [e.kind for e in on_record]


def test_ephemeral_memory_keeps_nothing_on_disk(running_game: Executor, home: Path) -> None:
    model = ScriptedModel([say("hi")])
    s = session(running_game, model, memory="ephemeral")
    assert isinstance(s.threads, MemoryThreadStore)
    s.send_sync("eph", "hello")
    assert running_game.runtime.threads.load("eph") is None


def test_open_jobs_ride_at_the_end_so_the_stable_prompt_stays_a_prefix(running_game: Executor) -> None:
    model = ScriptedModel([calls(call("demo__loop_farm", {})), say("ok")])
    session(running_game, model).send_sync("t", "loop")
    first, second = (messages for messages, _ in model.requests)
    assert first[0]["role"] == "system" and "execution_id=" not in first[0]["content"]
    job = second[-1]
    assert (
        job["role"] == "system" and "execution_id=" in job["content"] and "demo.loop_farm" in job["content"]
    )
    # Everything the first step sent is, unchanged, the start of what the second sends.
    assert second[: len(first)] == first
    assert json.dumps(model.requests[0][1][0].openai())  # tools are serializable for a real API


def test_the_agent_sees_and_controls_only_its_own_threads_jobs(running_game: Executor) -> None:
    """Status and stop are not side doors: another thread's job, or a CLI-only task's, is not_found."""
    other = running_game.execute_sync("demo.loop_farm", caller="agent", origin="thread:other")
    model = ScriptedModel([
        calls(call("get_task_status", {"execution_id": other.execution_id})),
        calls(call("stop_task", {"execution_id": other.execution_id})),
        say("I cannot see that job."),
    ])  # fmt: skip
    result = session(running_game, model).send_sync("mine", "stop it")
    model.assert_consumed()
    assert tool_steps(result) == [("get_task_status", "not_found"), ("stop_task", "not_found")]
    context = json.dumps(model.requests[0][0], ensure_ascii=False)
    assert other.execution_id not in context  # not in its context either
    assert running_game.jobs.status(other.execution_id).status is TaskStatus.RUNNING
    asyncio.run(running_game.control(other.execution_id, "stop", caller="cli"))  # a person may

    # A CLI-only job stays invisible even when the setting widens the agent's view to every thread.
    hang = running_game.execute_sync("demo.debug_hang", caller="cli")
    model = ScriptedModel([calls(call("stop_task", {"execution_id": hang.execution_id})), say("no")])
    wide = session(running_game, model, job_scope="caller")
    assert tool_steps(wide.send_sync("mine", "stop the hang")) == [("stop_task", "not_found")]
    assert running_game.jobs.status(hang.execution_id).status is TaskStatus.RUNNING
    # Widened, it does see the other thread's agent job.
    model = ScriptedModel([calls(call("get_task_status", {"execution_id": other.execution_id})), say("ok")])
    seen = session(running_game, model, job_scope="caller").send_sync("mine", "status")
    assert tool_steps(seen) == [("get_task_status", "stopped")]
    os.killpg(hang.data["pid"], signal.SIGKILL)  # it ignores stops: ended here, not by the teardown's graces


def test_a_failed_confirmed_call_still_blocks_business_tools(running_game: Executor, home: Path) -> None:
    model = ScriptedModel([
        calls(call("demo__salvage_relics", {"rarity": 4}), call("demo__status", id="later")),
        calls(call("demo__start_game")),  # after the confirmed call failed: must not run
    ])  # fmt: skip
    s = session(running_game, model)
    asked = s.send_sync("t", "salvage")
    assert asked.status == "needs_confirmation"
    # The rest of that response was answered, so the next request is a valid conversation.
    assert tool_steps(asked)[-1] == ("demo.status", "skipped")
    running_game.execute_sync("demo.exit_game", caller="cli")
    done = s.send_sync("t", "yes")
    model.assert_consumed()
    assert tool_steps(done) == [("demo.salvage_relics", "rejected"), ("demo.start_game", "skipped")]
    assert game.load_state(home)["salvaged_total"] == 0


def test_a_huge_argument_is_refused_and_never_stored_or_echoed_whole(
    running_game: Executor, home: Path
) -> None:
    """Audit 3: a 1 MB argument was echoed in full and added 2.5 MB to the store per call."""
    huge = "金" * 500_000
    model = ScriptedModel([
        calls(call("demo__farm_instance", {**GOLD, "instance_name": huge})),
        say("That was too large."),
    ])  # fmt: skip
    result = session(running_game, model).send_sync("t", "farm")
    model.assert_consumed()
    assert tool_steps(result) == [("demo.farm_instance", "rejected")]
    answered = next(m for m in model.requests[1][0] if m["role"] == "tool")
    assert "over the limit" in answered["content"] and len(answered["content"]) < 2_000
    stored = running_game.runtime.threads
    assert huge not in json.dumps(stored.messages("t"), ensure_ascii=False)
    assert huge not in json.dumps([s.to_dict() for s in stored.steps("t")], ensure_ascii=False)
    import sqlite3

    db = sqlite3.connect(home / "tether.db")
    widest = max(
        db.execute(f"SELECT COALESCE(MAX(LENGTH({column})), 0) FROM {table}").fetchone()[0]
        for table, column in [("messages", "message"), ("steps", "args"), ("steps", "result"),
                              ("jobs", "params"), ("jobs", "message"), ("events", "payload")]
    )  # fmt: skip
    db.close()
    assert widest < 5_000


def test_a_result_too_large_to_carry_is_kept_whole_beside_the_job(support: Executor) -> None:
    result = support.execute_sync("t.big_result", caller="agent")
    assert result.status is TaskStatus.COMPLETED
    assert result.data["truncated"] is True and result.data["data_bytes"] > 600_000
    spilled = json.loads(Path(result.data["data_file"]).read_text())
    assert len(spilled["blob"]) == 600_000  # nothing lost
    assert len(support.jobs.status(result.execution_id).model_dump_json()) < 10_000


def test_the_person_is_asked_only_about_a_call_that_would_otherwise_run(executor: Executor) -> None:
    """A "yes" is never followed by "rejected": a destructive call that the game's state or a busy lock
    refuses is refused at once, naming why, and nobody is asked."""
    from tether.models.offline import OfflineModel

    chat = session(executor, OfflineModel())
    result = chat.send_sync("q1", "分解四星遗器")  # the game is not running
    assert result.status == "failed" and chat.pending("q1") is None
    assert tool_results(result)[0]["status"] == "rejected" and "start it first" in result.final
    executor.execute_sync("demo.start_game", caller="cli")
    loop = executor.execute_sync("demo.loop_farm", caller="cli")  # holds the game's lock
    result = chat.send_sync("q2", "分解四星遗器")
    assert result.status == "failed" and chat.pending("q2") is None
    assert loop.execution_id in result.final and "占用" in result.final
    asyncio.run(executor.control(loop.execution_id, "stop", caller="cli"))
    result = chat.send_sync("q3", "分解四星遗器")  # now only the person's word is missing
    assert result.status == "needs_confirmation" and chat.pending("q3") is not None


# -- the truth about a turn, and a model stuck in a loop -------------------------------------------


def test_a_turn_whose_work_was_refused_says_it_failed(running_game: Executor, home: Path) -> None:
    """The model's prose after a refusal is not the work done: the turn's status says what happened."""
    model = ScriptedModel([
        calls(call("demo__farm_instance", {**GOLD, "instance_name": "金币"})),  # rejected: an alias
        say("I farmed 金币 for you."),  # a small model's claim
    ])  # fmt: skip
    result = session(running_game, model).send_sync("t", "farm gold")
    model.assert_consumed()
    assert result.status == "failed", result
    assert game.load_state(home)["farm_attempts_total"] == 0


def test_the_same_refused_call_twice_ends_the_turn_with_a_clear_answer(running_game: Executor) -> None:
    """A real small model called get_task_status("") 18 times in one turn, each rejected."""
    model = ScriptedModel([calls(call("get_task_status", {"execution_id": ""})) for _ in range(2)])
    result = session(running_game, model, max_steps=12).send_sync("t", "how is it going?")
    model.assert_consumed()  # no third request: the repetition ended the turn
    assert result.status == "failed"
    assert "get_task_status" in result.final and "twice" in result.final
    assert tool_steps(result) == [("get_task_status", "rejected")] * 2


def test_the_same_refused_call_twice_is_said_in_the_persons_language(running_game: Executor) -> None:
    model = ScriptedModel([calls(call("get_task_status", {"execution_id": ""})) for _ in range(2)])
    result = session(running_game, model).send_sync("t", "进度怎么样？")
    assert result.status == "failed" and "两次" in result.final


def test_rejections_count_as_failures_in_the_budget_review(running_game: Executor) -> None:
    model = ScriptedModel([
        calls(call("get_task_status", {"execution_id": "nope-1"})),
        calls(call("get_task_status", {"execution_id": "nope-2"})),
    ])  # fmt: skip
    manager = ScriptedModel([say('{"stop": "it keeps failing"}')])
    s = ConversationSession(running_game, model, manager=manager, settings=AgentSettings(max_steps=2))
    result = s.send_sync("t", "status of my jobs")
    review = next(step for step in result.steps if step.kind == "budget")
    assert review.args is not None
    assert review.args["failed_steps"] == 2 and review.args["completed_steps"] == 0


def test_a_slow_model_is_seen_thinking_on_the_threads_events(executor: Executor) -> None:
    """A cold prompt on a CPU takes minutes before the first token: the turn says the model works."""
    from tests.support.fake_openai import FakeOpenAI, chunk
    from tether.events import ModelThinking
    from tether.models.openai_compat import OpenAICompatModel

    fake = FakeOpenAI()
    try:
        fake.stream(
            [chunk({"content": "The "}), chunk({"content": "game is off."}), chunk({}, "stop")],
            first_delay=0.6,
            gap=0.3,
        )
        model = OpenAICompatModel(model="m", base_url=fake.url, stream=True, progress_every_s=0.1)
        result = session(executor, model).send_sync("slow", "is the game on?")
        assert result.status == "completed" and result.final == "The game is off."
        thinking = [e for e in executor.runtime.events.read(after=0) if isinstance(e, ModelThinking)]
        assert thinking and thinking[0].tokens == 0 and thinking[0].thread_id == "slow"
        assert thinking[-1].elapsed_s >= thinking[0].elapsed_s
    finally:
        fake.close()


def test_a_call_a_turn_left_unanswered_is_answered_before_the_model_reads_the_thread(
    executor: Executor,
) -> None:
    """A turn cancelled (Ctrl-C, the page's Cancel) after the model's call and before its result left a
    call with no answer; real servers refuse such a conversation (every tool call needs its result)."""
    threads = executor.runtime.threads
    model = ScriptedModel([say("first"), say("second")])
    chat = session(executor, model)
    chat.send_sync("cut", "hello")
    dangling = {"id": "c9", "type": "function", "function": {"name": "demo__status", "arguments": "{}"}}
    threads.append("cut", 1, 90, {"role": "assistant", "content": "", "tool_calls": [dangling]})
    threads.append(
        "cut", 1, 91, {"role": "tool", "tool_call_id": "zz", "name": "x", "content": "{}"}
    )  # no call
    chat.send_sync("cut", "again")
    sent = model.requests[-1][0]
    calls = [c["id"] for m in sent if m.get("role") == "assistant" for c in m.get("tool_calls") or []]
    answers = [m["tool_call_id"] for m in sent if m.get("role") == "tool"]
    assert calls == answers == ["c9"], sent
    answer = next(m for m in sent if m.get("role") == "tool")
    assert "not run" in answer["content"]


# -- a small local model's repertoire (tether.testing.SmallModel) ----------------------------------


@pytest.mark.parametrize("shape", ["fenced", "tagged", "bare", "no_prefix", "function_name", "schema_echo"])
def test_a_call_a_small_model_writes_as_text_runs(running_game: Executor, home: Path, shape: str) -> None:
    from tether.testing import SmallModel, written

    model = SmallModel(
        [written("demo__farm_instance", {**GOLD, "attempts": 1}, shape=shape), say("Farmed once.")]
    )
    result = session(running_game, model).send_sync("t", "farm gold once")
    model.assert_consumed()
    assert tool_steps(result) == [("demo.farm_instance", "completed")] and result.status == "completed"
    assert game.load_state(home)["farm_attempts_total"] == 1


def test_a_call_in_a_sentence_is_sent_back_once_and_its_repair_runs(running_game: Executor) -> None:
    from tether.testing import SmallModel, written

    model = SmallModel([
        written("demo__status", shape="in_sentence"),
        written("demo__status", shape="tagged"),  # the answer to the repair request
        say("The game is running."),
    ])  # fmt: skip
    result = session(running_game, model).send_sync("t", "status?")
    model.assert_consumed()
    assert tool_steps(result) == [("demo.status", "completed")]
    assert "cannot be used" in str(model.requests[1][0][-1]["content"])


def test_a_result_a_small_model_makes_up_is_never_the_answer(running_game: Executor, home: Path) -> None:
    from tether.testing import SmallModel, made_up_result

    model = SmallModel(
        [made_up_result("demo.farm_instance", "farmed 2 times"), made_up_result("demo.farm_instance")]
    )
    result = session(running_game, model).send_sync("t", "farm gold twice")
    assert result.status == "failed" and "instead of calling the tool" in result.final
    assert game.load_state(home)["farm_attempts_total"] == 0


@pytest.mark.parametrize(("language", "heading"), [("en", "Your role here"), ("zh", "你在这里的角色")])
def test_a_persona_comes_after_tethers_own_rules(executor: Executor, language: str, heading: str) -> None:
    """A persona (a plan profile's system prompt) is read by the model after tether's instructions, in
    the session's language, and says it changes none of them; without one the prompt is as before."""
    model = ScriptedModel([say("ok")])
    persona = "Answer like the research desk: one line, with the source."
    settings = AgentSettings(memory="ephemeral", language=language)  # type: ignore[arg-type]
    with_persona = ConversationSession(executor, model, settings=settings, persona=persona)
    asyncio.run(with_persona.send("t", "hello"))
    prompt = model.requests[0][0][0]["content"]
    assert f"{heading}" in prompt and persona in prompt
    assert prompt.index(persona) > prompt.index(heading) > 0
    plain = ScriptedModel([say("ok")])
    asyncio.run(ConversationSession(executor, plain, settings=settings).send("t", "hello"))
    assert heading not in plain.requests[0][0][0]["content"]
