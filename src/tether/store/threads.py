"""Conversation threads: messages and the steps of every turn, in SQLite or in memory.

A step's id is deterministic, ``<thread>:<turn>:<index>``: each model call and each tool execution is one
step, so a turn can later be replayed or made durable step by step without reshaping it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from tether.store.schema import DB_FILE, Database


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def step_id(thread_id: str, turn: int, index: int) -> str:
    return f"{thread_id}:{turn}:{index}"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    thread_id: str
    turn: int
    index: int
    kind: str  # "model", "tool", "confirmation", "budget", "final"
    tool: str | None = None
    args: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    text: str = ""
    created_at: str = field(default_factory=_now)

    @property
    def step_id(self) -> str:
        return step_id(self.thread_id, self.turn, self.index)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id,
            "index": self.index,
            "turn": self.turn,
            "kind": self.kind,
            "tool": self.tool,
            "args": self.args,
            "result": self.result,
            "text": self.text,
            "created_at": self.created_at,
        }


@dataclass(slots=True, kw_only=True)
class ThreadState:
    thread_id: str
    title: str = ""
    summary: str = ""
    folded: int = 0  # how many of the oldest messages the summary stands for
    pending: dict[str, Any] | None = None  # a call waiting for the person's confirmation
    turns: int = 0
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)


class ThreadStore(Protocol):
    def load(self, thread_id: str) -> ThreadState | None: ...
    def save(self, state: ThreadState) -> None: ...
    def messages(self, thread_id: str) -> list[dict[str, Any]]: ...
    def append(self, thread_id: str, turn: int, message: dict[str, Any]) -> None: ...
    def add_step(self, step: StepRecord) -> None: ...
    def steps(self, thread_id: str) -> list[StepRecord]: ...
    def threads(self, limit: int = 50) -> list[ThreadState]: ...


class MemoryThreadStore:
    """``memory = "ephemeral"``: the conversation lives as long as this object."""

    def __init__(self) -> None:
        self._threads: dict[str, ThreadState] = {}
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._steps: dict[str, list[StepRecord]] = {}

    def load(self, thread_id: str) -> ThreadState | None:
        return self._threads.get(thread_id)

    def save(self, state: ThreadState) -> None:
        state.updated_at = _now()
        self._threads[state.thread_id] = state

    def messages(self, thread_id: str) -> list[dict[str, Any]]:
        return list(self._messages.get(thread_id, []))

    def append(self, thread_id: str, turn: int, message: dict[str, Any]) -> None:
        self._messages.setdefault(thread_id, []).append(message)

    def add_step(self, step: StepRecord) -> None:
        self._steps.setdefault(step.thread_id, []).append(step)

    def steps(self, thread_id: str) -> list[StepRecord]:
        return list(self._steps.get(thread_id, []))

    def threads(self, limit: int = 50) -> list[ThreadState]:
        return sorted(self._threads.values(), key=lambda t: t.updated_at, reverse=True)[:limit]


class SqliteThreadStore(Database):
    @classmethod
    def in_home(cls, home: Path, *, busy_timeout_s: float | None = None) -> SqliteThreadStore:
        if busy_timeout_s is None:
            return cls(home / DB_FILE)
        return cls(home / DB_FILE, busy_timeout_s=busy_timeout_s)

    def _run(self, sql: str, args: tuple[Any, ...]) -> None:
        with self._write() as conn:
            conn.execute(sql, args)

    def load(self, thread_id: str) -> ThreadState | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM threads WHERE thread_id = ?", (thread_id,)).fetchone()
        return None if row is None else _state(row)

    def save(self, state: ThreadState) -> None:
        state.updated_at = _now()
        self._run(
            "INSERT INTO threads (thread_id, title, summary, folded, pending, turns, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(thread_id) DO UPDATE SET title = excluded.title,"
            " summary = excluded.summary, folded = excluded.folded, pending = excluded.pending,"
            " turns = excluded.turns, updated_at = excluded.updated_at",
            (
                state.thread_id,
                state.title,
                state.summary,
                state.folded,
                None if state.pending is None else json.dumps(state.pending, ensure_ascii=False),
                state.turns,
                state.created_at,
                state.updated_at,
            ),
        )

    def messages(self, thread_id: str) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT message FROM messages WHERE thread_id = ? ORDER BY seq", (thread_id,)
            ).fetchall()
        return [json.loads(row["message"]) for row in rows]

    def append(self, thread_id: str, turn: int, message: dict[str, Any]) -> None:
        self._run(
            "INSERT INTO messages (thread_id, seq, turn, message, created_at) VALUES"
            " (?, (SELECT COALESCE(MAX(seq), -1) + 1 FROM messages WHERE thread_id = ?), ?, ?, ?)",
            (thread_id, thread_id, turn, json.dumps(message, ensure_ascii=False), _now()),
        )

    def add_step(self, step: StepRecord) -> None:
        self._run(
            "INSERT OR REPLACE INTO steps (step_id, thread_id, turn, idx, kind, tool, args, result, text,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                step.step_id,
                step.thread_id,
                step.turn,
                step.index,
                step.kind,
                step.tool,
                None if step.args is None else json.dumps(step.args, ensure_ascii=False),
                None if step.result is None else json.dumps(step.result, ensure_ascii=False),
                step.text,
                step.created_at,
            ),
        )

    def steps(self, thread_id: str) -> list[StepRecord]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM steps WHERE thread_id = ? ORDER BY turn, idx", (thread_id,)
            ).fetchall()
        return [
            StepRecord(
                thread_id=row["thread_id"],
                turn=row["turn"],
                index=row["idx"],
                kind=row["kind"],
                tool=row["tool"],
                args=None if row["args"] is None else json.loads(row["args"]),
                result=None if row["result"] is None else json.loads(row["result"]),
                text=row["text"],
                created_at=row["created_at"],
            )
            for row in rows
        ]

    def threads(self, limit: int = 50) -> list[ThreadState]:
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM threads ORDER BY updated_at DESC LIMIT ?", (limit,)).fetchall()
        return [_state(row) for row in rows]


def _state(row: sqlite3.Row) -> ThreadState:
    return ThreadState(
        thread_id=row["thread_id"],
        title=row["title"],
        summary=row["summary"],
        folded=row["folded"],
        pending=None if row["pending"] is None else json.loads(row["pending"]),
        turns=row["turns"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
