"""The offline model through every confirmation path, end to end on the demo game (issue 23): after
the person's answer the reply reports the work (or that nothing ran), never "I can't do 'yes'"."""

from __future__ import annotations

import pytest

from tether.agent.session import ConversationSession
from tether.config import AgentSettings
from tether.execution.executor import Executor
from tether.models.offline import OfflineModel

REFUSALS = ("做不到", "没有对应的工具", "can't do", "none of my tools", "我能做的有", "I can:")


def chat(executor: Executor) -> ConversationSession:
    return ConversationSession(executor, OfflineModel(), settings=AgentSettings())


def salvaged(result: object) -> list[int]:
    steps = getattr(result, "steps", [])
    return [
        s.args["rarity"]
        for s in steps
        if s.kind == "tool"
        and s.tool == "demo.salvage_relics"
        and (s.result or {}).get("status") == "completed"
    ]


def clean(final: str) -> None:
    assert not any(word in final for word in REFUSALS), final


@pytest.mark.parametrize(
    ("yes", "zh"),
    [("是", True), ("好的", True), ("确认", True), ("yes", False), ("ok", False), ("sure", False)],
)
def test_three_confirmed_calls_each_report_and_never_refuse_the_yes(
    running_game: Executor, yes: str, zh: bool
) -> None:
    session = chat(running_game)
    request = (
        "分解四星遗器，然后分解三星遗器，再分解二星遗器"
        if zh
        else ("salvage 4-star relics, then salvage 3-star relics, then salvage 2-star relics")
    )
    first = session.send_sync("t", request)
    assert first.status == "needs_confirmation"
    done: list[int] = []
    for expected in ("needs_confirmation", "needs_confirmation", "completed"):
        result = session.send_sync("t", yes)
        assert result.status == expected, result.final
        done += salvaged(result)
        clean(result.final)
    assert done == [4, 3, 2]


def test_a_no_to_the_second_call_cancels_in_the_requests_language(running_game: Executor) -> None:
    session = chat(running_game)
    session.send_sync("t", "分解四星遗器，然后分解三星遗器")
    session.send_sync("t", "是")
    result = session.send_sync("t", "不要")
    assert salvaged(result) == [] and "取消" in result.final
    clean(result.final)


def test_a_confirmation_in_a_compound_with_a_plain_call(running_game: Executor) -> None:
    for thread, request, yes in (
        ("zh", "刷一次金币，然后分解四星遗器，再做每日实训", "好的"),
        ("en", "farm gold once, then salvage 4-star relics, then do the dailies", "ok"),
    ):
        session = chat(running_game)
        first = session.send_sync(thread, request)
        assert first.status == "needs_confirmation"
        result = session.send_sync(thread, yes)
        assert result.status == "completed" and salvaged(result) == [4], result.final
        assert any(s.tool == "demo.daily_training" for s in result.steps if s.kind == "tool")
        clean(result.final)


def test_an_edited_answer_replaces_the_waiting_call(running_game: Executor) -> None:
    session = chat(running_game)
    first = session.send_sync("t", "分解四星遗器")
    assert first.status == "needs_confirmation"
    result = session.send_sync("t", "分解三星遗器")  # not a yes: a new request, asked about again
    assert result.status == "needs_confirmation" and salvaged(result) == []
    result = session.send_sync("t", "确认")
    assert salvaged(result) == [3]
    clean(result.final)


@pytest.mark.parametrize("yes", ["好的，执行吧", "嗯", "没问题", "yes please", "ok, go ahead", "sure, do it"])
def test_a_yes_in_more_words_confirms(running_game: Executor, yes: str) -> None:
    session = chat(running_game)
    assert session.send_sync("t", "分解四星遗器").status == "needs_confirmation"
    result = session.send_sync("t", yes)
    assert salvaged(result) == [4], result.final
    clean(result.final)


@pytest.mark.parametrize("no", ["不用了", "算了吧", "不是", "no thanks", "nope, cancel"])
def test_a_no_in_more_words_declines(running_game: Executor, no: str) -> None:
    session = chat(running_game)
    assert session.send_sync("t", "分解四星遗器").status == "needs_confirmation"
    result = session.send_sync("t", no)
    assert salvaged(result) == [] and ("取消" in result.final or "cancelled" in result.final), result.final


@pytest.mark.parametrize("text", ["确认分解三星遗器", "yes and no", "不好说", "yesterday"])
def test_an_answer_with_other_words_confirms_nothing(running_game: Executor, text: str) -> None:
    session = chat(running_game)
    assert session.send_sync("t", "分解四星遗器").status == "needs_confirmation"
    result = session.send_sync("t", text)
    assert 4 not in salvaged(result), result.final
