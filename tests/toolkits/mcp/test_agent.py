"""An agent turn (``tether.testing``'s scripted model, the only fake) calls imported tools as it calls
native ones: through the executor, the person's consent first where the danger asks for it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.toolkits.mcp.conftest import ran, refresh, server_entry
from tether.agent.session import ConversationSession
from tether.execution.executor import Executor
from tether.testing import ScriptedModel, call, calls, say
from tether.toolkits.standard import registry


def _tools(result: object) -> list[tuple[str, str | None]]:
    return [(s.tool, (s.result or {}).get("status")) for s in result.steps if s.kind == "tool"]  # type: ignore[attr-defined]


def test_an_agent_turn_calls_an_imported_tool_through_the_executor(
    home: Path, notes_log: Path, make_executor: Callable[..., Executor]
) -> None:
    (home / "settings.toml").write_text(
        server_entry("notes", notes_log, trust_read_only=True, danger={"countWords": "safe"}),
        encoding="utf-8",
    )
    executor = make_executor(registry)
    refresh(executor)
    session = ConversationSession(executor, ScriptedModel([]))
    offered = {tool.name: tool for tool in session.surface.tools}
    assert offered["mcp__notes__read_note"].parameters["properties"]["mode"]["enum"] == ["short", "full"]
    assert "mcp__notes__read_file" not in offered  # the name two tools share is not offered

    model = ScriptedModel([
        calls(call("mcp__notes__read_note", {"name": "shopping"})),  # read-only, trusted: safe
        calls(call("mcp__notes__count_words", {"text": "one two three"})),  # made safe by settings
        say("Your shopping note says: buy milk (3 words)."),
    ])  # fmt: skip
    result = ConversationSession(executor, model).send_sync("t", "what does my shopping note say?")
    model.assert_consumed()
    assert _tools(result) == [("mcp.notes.read_note", "completed"), ("mcp.notes.count_words", "completed")]
    assert [c["tool"] for c in ran(notes_log)] == ["read_note", "countWords"]
    jobs = {record.task_id: record for record in executor.store.list()}
    assert jobs["mcp.notes.read_note"].origin == "thread:t"


def test_a_destructive_imported_tool_waits_for_the_persons_yes(
    home: Path, notes_log: Path, make_executor: Callable[..., Executor]
) -> None:
    # a setting that would lower the server's destructive hint does not
    (home / "settings.toml").write_text(
        server_entry("notes", notes_log, danger={"delete_*": "safe"}), encoding="utf-8"
    )
    executor = make_executor(registry)
    refresh(executor)
    model = ScriptedModel([
        calls(call("mcp__notes__delete_note", {"name": "old"})),
        say("Deleted the note old."),
    ])  # fmt: skip
    session = ConversationSession(executor, model)
    asked = session.send_sync("t", "删除笔记 old")
    assert asked.status == "needs_confirmation"
    assert not notes_log.exists()  # nothing ran while it waits
    done = session.send_sync("t", "好的")
    model.assert_consumed()
    assert _tools(done) == [("mcp.notes.delete_note", "completed")]
    assert [c["tool"] for c in ran(notes_log)] == ["delete_note"]
