"""Conversation threads: turns, messages and the steps of every turn, in the database or in memory.

- **One writer per thread.** ``begin_turn`` allocates the next turn number atomically and only when no
  other live process is in a turn of that thread (a turn whose owner died is marked ``interrupted``).
- **Each home settles its own turns.** A turn records the installation (tether home) and host of its
  process. Several homes may share the database; another home's process is out of this one's sight
  (another host, or another PID namespace), so its running turn is never taken for dead here: it
  stays running, and the thread busy, until its own home ends or settles it.
- **Replays are no-ops.** A message is keyed by ``(thread, turn, index)``; appending the same key twice
  stores it once. A step's id is deterministic, ``<thread>:<turn>:<index>``: it is recorded ``started``
  (with the execution it is about to start) before anything runs, then ``finished`` with its result.
- **Bounded reads.** A turn reads only the messages after the folded prefix (``from_seq``), so its cost
  does not grow with the length of the conversation.
- Every step and turn boundary is appended to the event log in the same transaction.

This module owns the records, the ``ThreadStore`` interface and the in-memory store (``memory =
"ephemeral"``); ``store/threads_sql.py`` keeps threads in the database.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from tether.errors import ConfigError
from tether.events import Event

OPEN_TURN = ("running", "interrupted")  # a turn that can still end (once)
PROACTIVE = "proactive"  # a turn that is an agent's message with no message from the person before it
REPLAYED = -1  # record_step: the step is on record as given already

Alive = Callable[[int, float], bool]


class ThreadDeleted(ConfigError):
    """A deleted thread's id: never given out again."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def step_id(thread_id: str, turn: int, index: int) -> str:
    return f"{thread_id}:{turn}:{index}"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    thread_id: str
    turn: int
    index: int
    kind: str  # "model", "tool", "confirmation", "budget", "final"
    status: str = "finished"  # "started" until its outcome is on record
    tool: str | None = None
    args: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    text: str = ""
    execution_id: str | None = None
    call_id: str | None = None  # the model's id of the tool call this step answers
    created_at: str = field(default_factory=now)

    @property
    def step_id(self) -> str:
        return step_id(self.thread_id, self.turn, self.index)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id,
            "index": self.index,
            "turn": self.turn,
            "kind": self.kind,
            "status": self.status,
            "tool": self.tool,
            "args": self.args,
            "result": self.result,
            "text": self.text,
            "execution_id": self.execution_id,
            "call_id": self.call_id,
            "created_at": self.created_at,
        }


@dataclass(slots=True, kw_only=True)
class ThreadState:
    thread_id: str
    title: str = ""
    summary: str = ""
    folded: int = 0  # messages with a lower seq are folded into the summary
    pending: dict[str, Any] | None = None  # a call waiting for the person's confirmation
    turns: int = 0
    created_at: str = field(default_factory=now)
    updated_at: str = field(default_factory=now)
    agent: str | None = None  # the agent it belongs to (None: the default assistant)
    parent: str | None = None  # for a delegated thread: the step that asked (``<thread>:<turn>:<i>``)
    private: bool = False  # nothing from it is remembered (``store/memories.py``)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRecord:
    thread_id: str
    turn: int
    status: str  # "running", "completed", "needs_confirmation", "budget_exhausted", "failed", "interrupted"
    message: str
    final: str
    started_at: str
    ended_at: str | None
    installation: str | None = None  # the home whose process runs (or ran) it
    host: str | None = None


class ThreadStore(Protocol):
    def load(self, thread_id: str) -> ThreadState | None: ...
    def save(self, state: ThreadState) -> None: ...
    def begin_turn(
        self, thread_id: str, message: str, owner: tuple[int, float], alive: Alive
    ) -> int | None: ...
    def end_turn(
        self, thread_id: str, turn: int, status: str, final: str, event: Event | None = None
    ) -> bool: ...
    def hold_turn(self, thread_id: str, turn: int, owner: tuple[int, float]) -> bool: ...
    def turn(self, thread_id: str, turn: int) -> TurnRecord | None: ...
    def turns_with_status(self, thread_id: str, status: str) -> list[TurnRecord]: ...
    def messages(self, thread_id: str, *, from_seq: int = 0) -> list[dict[str, Any]]: ...
    def append(self, thread_id: str, turn: int, index: int, message: dict[str, Any]) -> bool: ...
    def record_step(
        self, step: StepRecord, event: Event | None = None, message: dict[str, Any] | None = None
    ) -> int: ...
    def steps(self, thread_id: str, turn: int | None = None) -> list[StepRecord]: ...
    def threads(self, limit: int = 50, before: tuple[str, str] | None = None) -> list[ThreadState]: ...
    def turns(self, thread_id: str, limit: int = 500) -> list[TurnRecord]: ...
    def rename(self, thread_id: str, title: str) -> bool: ...
    def interrupt_orphans(
        self, alive: Alive, spare: Collection[str] = (), only: str | None = None
    ) -> list[tuple[str, int]]: ...
    def ids_with_prefix(self, prefix: str, limit: int = 5) -> list[str]: ...
    def emit(self, event: Event) -> Event: ...
    def forget(self, thread_id: str) -> None: ...
    def deleted(self, thread_id: str) -> bool: ...
    def assign(self, thread_id: str, agent: str | None, parent: str | None = None) -> None: ...
    def set_private(self, thread_id: str, private: bool) -> bool: ...
    def post(
        self, thread_id: str, agent: str, said: str, title: str, event: Callable[[int], Event] | None = None
    ) -> int | None: ...


class MemoryThreadStore:
    """``memory = "ephemeral"``: the conversation lives as long as this object (events are not kept)."""

    def __init__(self) -> None:
        self._threads: dict[str, ThreadState] = {}
        self._turns: dict[tuple[str, int], TurnRecord] = {}
        self._messages: dict[str, dict[tuple[int, int], dict[str, Any]]] = {}
        self._steps: dict[str, dict[str, StepRecord]] = {}
        self._deleted: set[str] = set()

    def load(self, thread_id: str) -> ThreadState | None:
        found = self._threads.get(thread_id)
        return None if found is None else replace(found)

    def save(self, state: ThreadState) -> None:
        state.updated_at = now()
        self._threads[state.thread_id] = replace(state)

    def begin_turn(self, thread_id: str, message: str, owner: tuple[int, float], alive: Alive) -> int | None:
        if thread_id in self._deleted:
            raise ThreadDeleted(f"thread {thread_id!r} was deleted; its id is not used again: pick another")
        state = self._threads.setdefault(thread_id, ThreadState(thread_id=thread_id, title=title_of(message)))
        state.title = state.title or title_of(message)
        if any(t.status == "running" for (tid, _), t in self._turns.items() if tid == thread_id):
            return None
        state.turns += 1
        state.updated_at = now()  # as the SQL store's begin_turn dates the thread
        self._turns[(thread_id, state.turns)] = TurnRecord(
            thread_id=thread_id,
            turn=state.turns,
            status="running",
            message=message,
            final="",
            started_at=now(),
            ended_at=None,
        )
        return state.turns

    def end_turn(
        self, thread_id: str, turn: int, status: str, final: str, event: Event | None = None
    ) -> bool:
        found = self._turns.get((thread_id, turn))
        if found is None or found.status not in OPEN_TURN:
            return False
        self._turns[(thread_id, turn)] = replace(found, status=status, final=final, ended_at=now())
        return True

    def hold_turn(self, thread_id: str, turn: int, owner: tuple[int, float]) -> bool:
        found = self._turns.get((thread_id, turn))
        return found is not None and found.status == "running"

    def turn(self, thread_id: str, turn: int) -> TurnRecord | None:
        return self._turns.get((thread_id, turn))

    def turns_with_status(self, thread_id: str, status: str) -> list[TurnRecord]:
        return [t for (tid, _), t in sorted(self._turns.items()) if tid == thread_id and t.status == status]

    def messages(self, thread_id: str, *, from_seq: int = 0) -> list[dict[str, Any]]:
        return list(self._messages.get(thread_id, {}).values())[from_seq:]

    def append(self, thread_id: str, turn: int, index: int, message: dict[str, Any]) -> bool:
        known = self._messages.setdefault(thread_id, {})
        if (turn, index) in known:
            return False
        known[(turn, index)] = message
        return True

    def record_step(
        self, step: StepRecord, event: Event | None = None, message: dict[str, Any] | None = None
    ) -> int:
        steps = self._steps.setdefault(step.thread_id, {})
        known = steps.get(step.step_id)
        if known is not None and not is_news(step_content(known), step_content(step)):
            return REPLAYED
        steps[step.step_id] = step
        if message is not None:
            self.append(step.thread_id, step.turn, step.index + 1, message)
        return 0

    def steps(self, thread_id: str, turn: int | None = None) -> list[StepRecord]:
        found = self._steps.get(thread_id, {}).values()
        return sorted((s for s in found if turn is None or s.turn == turn), key=lambda s: (s.turn, s.index))

    def threads(self, limit: int = 50, before: tuple[str, str] | None = None) -> list[ThreadState]:
        found = sorted(self._threads.values(), key=lambda t: (t.updated_at, t.thread_id), reverse=True)
        if before is not None:
            found = [t for t in found if (t.updated_at, t.thread_id) < before]
        return [replace(t) for t in found[:limit]]

    def turns(self, thread_id: str, limit: int = 500) -> list[TurnRecord]:
        return [t for (tid, _), t in sorted(self._turns.items()) if tid == thread_id][-limit:]

    def rename(self, thread_id: str, title: str) -> bool:
        found = self._threads.get(thread_id)
        if found is None:
            return False
        found.title, found.updated_at = title, now()
        return True

    def interrupt_orphans(
        self, alive: Alive, spare: Collection[str] = (), only: str | None = None
    ) -> list[tuple[str, int]]:
        return []  # an ephemeral thread dies with its process: nothing outlives it to settle

    def ids_with_prefix(self, prefix: str, limit: int = 5) -> list[str]:
        return sorted(t for t in self._threads if t.startswith(prefix))[:limit]

    def emit(self, event: Event) -> Event:
        return event

    def forget(self, thread_id: str) -> None:
        self._threads.pop(thread_id, None)
        self._messages.pop(thread_id, None)
        self._steps.pop(thread_id, None)
        self._turns = {k: v for k, v in self._turns.items() if k[0] != thread_id}
        self._deleted.add(thread_id)

    def deleted(self, thread_id: str) -> bool:
        return thread_id in self._deleted

    def assign(self, thread_id: str, agent: str | None, parent: str | None = None) -> None:
        state = self._threads.setdefault(thread_id, ThreadState(thread_id=thread_id))
        check_assign(state, agent, parent)
        state.agent, state.parent = agent, parent or state.parent

    def set_private(self, thread_id: str, private: bool) -> bool:
        state = self._threads.get(thread_id)
        if state is None:
            return False
        state.private = private
        return True

    def post(
        self, thread_id: str, agent: str, said: str, title: str, event: Callable[[int], Event] | None = None
    ) -> int | None:
        if thread_id in self._deleted:
            raise ThreadDeleted(f"thread {thread_id!r} was deleted; its id is not used again: pick another")
        state = self._threads.setdefault(thread_id, ThreadState(thread_id=thread_id, title=title))
        state.agent = state.agent or agent
        if any(t.status == "running" for (tid, _), t in self._turns.items() if tid == thread_id):
            return None
        state.turns += 1
        state.updated_at = at = now()
        self._turns[(thread_id, state.turns)] = TurnRecord(
            thread_id=thread_id, turn=state.turns, status=PROACTIVE, message="", final=said,
            started_at=at, ended_at=at,
        )  # fmt: skip
        self.append(thread_id, state.turns, 0, {"role": "assistant", "content": said})
        return state.turns


def check_assign(state: ThreadState, agent: str | None, parent: str | None = None) -> None:
    """A thread keeps the agent it began with: another one may not take it over. A delegation's thread
    (``parent``: the step that delegated) stays that delegation's: neither a person nor another step
    talks in it, and a delegation never takes a thread someone began."""
    if state.parent and parent != state.parent:
        raise ConfigError(
            f"thread {state.thread_id!r} belongs to the delegation asked at {state.parent}: it is not this "
            "delegation's, and a person answers in the thread that delegated"
        )
    if parent and not state.parent and state.turns:
        raise ConfigError(
            f"thread {state.thread_id!r} was begun outside a delegation: it is not this delegation's"
        )
    if state.turns and (state.agent or None) != (agent or None):
        had = state.agent or "assistant"
        raise ConfigError(
            f"thread {state.thread_id!r} belongs to agent {had!r}: start a new thread to talk to "
            f"{agent or 'assistant'!r}"
        )


def step_content(step: StepRecord) -> tuple[Any, ...]:
    return (
        step.kind, step.status, step.tool, json_or_none(step.args), json_or_none(step.result), step.text,
        step.execution_id, step.call_id,
    )  # fmt: skip


def is_news(known: tuple[Any, ...], given: tuple[Any, ...]) -> bool:
    """Whether writing ``given`` over ``known`` (both ``step_content``) changes the record: not when equal,
    and never back from an outcome to ``started`` (a replay passes through the start again)."""
    if known == given:
        return False
    return not (given[1] == "started" and known[1] != "started")


def title_of(message: str) -> str:
    return " ".join(message.split())[:80]


def json_or_none(value: object) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, default=str)
