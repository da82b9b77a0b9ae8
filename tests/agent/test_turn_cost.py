"""A turn costs the same on a long thread as on a short one.

Timing belongs in ``make bench`` (turn 3,000 next to turn 10); here the cause is pinned instead, on a
real SQLite file: every statement a turn runs finds its rows through an index (no scan of a table
that grows with the history), a turn runs the same statements at turn 5 as at turn 250, and the
messages it reads for the prompt stay bounded however long the thread gets.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import event

from tests.support.helpers import FAST
from tests.support.registry import registry
from tether.agent.session import ConversationSession
from tether.config import AgentSettings
from tether.execution.executor import Executor
from tether.runtime import Runtime
from tether.testing import ScriptedModel, call, calls, say

GROWING = ("messages", "steps", "turns", "events", "jobs")
FULL_SCAN = re.compile(r"\bSCAN (\w+)")


def _turn_script(turns: int) -> list[Any]:
    return [r for _ in range(turns) for r in (calls(call("t__quick")), say("done: it ran."))]


class Recorder:
    """Every statement the store runs while ``active``, with its parameters."""

    def __init__(self, runtime: Runtime) -> None:
        self.active = False
        self.seen: list[tuple[str, Any]] = []
        event.listen(runtime.db.engine, "before_cursor_execute", self._before)

    def _before(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if self.active:
            self.seen.append((statement, parameters))


def test_a_turn_on_a_long_thread_reads_what_a_turn_on_a_short_one_reads(home: Path) -> None:
    runtime = Runtime.open(home)
    settings = AgentSettings(compress_after_messages=40, keep_last_messages=12)
    executor = Executor(registry, runtime=runtime, settings=FAST)
    model = ScriptedModel(_turn_script(260))
    session = ConversationSession(executor, model, settings=settings)
    recorder = Recorder(runtime)
    read: list[int] = []
    original = session.threads.messages

    def counting(thread_id: str, *, from_seq: int = 0) -> list[dict[str, Any]]:
        rows = original(thread_id, from_seq=from_seq)
        if recorder.active:
            read.append(len(rows))
        return rows

    session.threads.messages = counting  # type: ignore[method-assign]
    try:
        profile: dict[int, tuple[list[str], int]] = {}
        for turn in range(1, 256):
            recorder.active = turn in (5, 250)
            recorder.seen.clear()
            read.clear()
            result = session.send_sync("long", f"turn {turn}: run the quick task")
            assert result.status == "completed", result
            if recorder.active:
                profile[turn] = ([_shape(s) for s, _ in recorder.seen], sum(read))
                _assert_indexed(runtime, recorder.seen)
            recorder.active = False
        short, long = profile[5], profile[250]
        # The same statements, not more of them (the difference is shown, both ways, when it fails).
        more, fewer = Counter(long[0]) - Counter(short[0]), Counter(short[0]) - Counter(long[0])
        assert not more and not fewer, {"only on the long thread": more, "only on the short": fewer}
        # Messages read (prompts, compression): bounded by the compression settings, not by the 1,000
        # messages the thread holds by then; a turn builds at most three prompts.
        assert long[1] <= 3 * settings.compress_after_messages, long[1]
    finally:
        executor.close()
        runtime.close()


def _shape(statement: str) -> str:
    """A statement without its literal values (a LIMIT or an IN list may differ)."""
    return re.sub(r"\s+", " ", re.sub(r"\d+", "N", statement)).strip()


def _assert_indexed(runtime: Runtime, seen: list[tuple[str, Any]]) -> None:
    with runtime.db.engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        for statement, parameters in seen:
            verb = statement.lstrip().split(None, 1)[0].upper()
            if verb not in ("SELECT", "UPDATE", "DELETE"):
                continue
            plan = raw.execute(f"EXPLAIN QUERY PLAN {statement}", parameters or ()).fetchall()
            scans = [m.group(1) for row in plan for m in [FULL_SCAN.search(str(row[-1]))] if m]
            assert not set(scans) & set(GROWING), (statement, plan)
