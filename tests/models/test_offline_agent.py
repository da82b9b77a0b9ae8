"""The offline model's answers through the real agent on the demo game (issue 23): the question's
answer from the real status result, no job said to be none, a question no tool knows runs nothing."""

from __future__ import annotations

from tether.agent.session import ConversationSession
from tether.config import AgentSettings
from tether.execution.executor import Executor
from tether.models.offline import OfflineModel


def chat(executor: Executor) -> ConversationSession:
    return ConversationSession(executor, OfflineModel(), settings=AgentSettings())


def tools_run(result: object) -> list[str]:
    return [s.tool for s in getattr(result, "steps", []) if s.kind == "tool"]


def test_how_many_times_is_answered_with_the_count(running_game: Executor) -> None:
    session = chat(running_game)
    assert session.send_sync("t", "刷两次金币").status == "completed"
    for question, said in (
        ("到现在一共刷了几次了？", "累计 2 次"),
        ("how many times have I farmed so far?", "2 in all"),
    ):
        result = session.send_sync("t", question)
        assert tools_run(result) == ["demo.status"] and said in result.final, result.final


def test_no_jobs_and_no_tool_are_said_as_such(running_game: Executor) -> None:
    session = chat(running_game)
    result = session.send_sync("q", "看看后台任务进度")
    assert tools_run(result) == [] and "没有正在运行的后台任务" in result.final, result.final
    result = session.send_sync("q", "明天会下雨吗")
    assert tools_run(result) == [] and "没法回答" in result.final, result.final
    result = session.send_sync("q", "help")
    assert tools_run(result) == [] and "“start the game”" in result.final, result.final


def test_what_no_tool_does_ends_failed_and_a_question_back_does_not(running_game: Executor) -> None:
    """'No tool does it' is the work not done (``UNABLE``: a script sees it); asking for a value is not."""
    session = chat(running_game)
    for text in ("明天会下雨吗", "帮我订一张机票", "book me a flight"):
        result = session.send_sync(text[:2].encode().hex(), text)
        assert result.status == "failed" and tools_run(result) == [], result.final
    result = session.send_sync("r", "遗器太多了")
    assert result.status == "completed" and tools_run(result) == [] and "2、3、4" in result.final
