"""Threads in the database: ``SqlThreadStore``, the SQL behind ``ThreadStore`` (store/threads.py).

It keeps the promises of store/threads.py across processes: ``begin_turn`` holds the thread's row
(``BEGIN IMMEDIATE`` on SQLite, ``FOR UPDATE`` on PostgreSQL) to give out the next turn once no live
process is in one (another home's turn always counts as live); a message or step written again by a
replay stores nothing new; every step and turn boundary is appended to the event log in the same
transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, text, update
from sqlalchemy.dialects import postgresql, sqlite

from tether.events import Event
from tether.store import schema
from tether.store.database import Database
from tether.store.events import append_event, append_event_now
from tether.store.threads import (
    OPEN_TURN,
    PROACTIVE,
    REPLAYED,
    Alive,
    StepRecord,
    ThreadDeleted,
    ThreadState,
    TurnRecord,
    check_assign,
    is_news,
    json_or_none,
    now,
    step_content,
    title_of,
)


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


Th, Tu, M, S, D = schema.threads, schema.turns, schema.messages, schema.steps, schema.deleted_threads

# Statements are built once: building and keying a SQLAlchemy construct costs far more than SQLite
# takes to run it (a turn runs some twenty of them). Parameters are ``k_*`` in WHERE, ``v_*`` in SET.
_K_THREAD, _K_TURN = bindparam("k_thread"), bindparam("k_turn")
_LOAD = select(Th).where(Th.c.thread_id == _K_THREAD)
_DELETED = select(D.c.thread_id).where(D.c.thread_id == _K_THREAD)
_SAVE = (
    update(Th)
    .where(Th.c.thread_id == _K_THREAD)
    .values(
        title=bindparam("v_title"),
        summary=bindparam("v_summary"),
        folded=bindparam("v_folded"),
        pending=bindparam("v_pending"),
        turns=bindparam("v_turns"),
        updated_at=bindparam("v_at"),
    )
)
_CREATE_THREAD = text(
    "INSERT INTO threads (thread_id, title, summary, folded, pending, turns, created_at, updated_at)"
    " VALUES (:id, :title, '', 0, NULL, 0, :at, :at) ON CONFLICT (thread_id) DO NOTHING"
)
_NAME_UNTITLED = (
    update(Th).where(Th.c.thread_id == _K_THREAD, Th.c.title == "").values(title=bindparam("v_title"))
)
_TURNS_OF = select(Th.c.turns).where(Th.c.thread_id == _K_THREAD)
_TURNS_OF_LOCKED = _TURNS_OF.with_for_update()
_RUNNING = select(Tu).where(Tu.c.thread_id == _K_THREAD, Tu.c.status == "running")
_ONE_TURN = select(Tu).where(Tu.c.thread_id == _K_THREAD, Tu.c.turn == _K_TURN)
_TURNS_WITH = (
    select(Tu).where(Tu.c.thread_id == _K_THREAD, Tu.c.status == bindparam("k_status")).order_by(Tu.c.turn)
)
_INTERRUPT_TURN = (
    update(Tu)
    .where(Tu.c.thread_id == _K_THREAD, Tu.c.turn == _K_TURN)
    .values(status="interrupted", ended_at=bindparam("v_at"))
)
_HOLD_TURN = (
    update(Tu)
    .where(
        Tu.c.thread_id == _K_THREAD,
        Tu.c.turn == _K_TURN,
        Tu.c.status == "running",
        Tu.c.installation == bindparam("k_installation"),
    )
    .values(owner_pid=bindparam("v_pid"), owner_create_time=bindparam("v_ct"))
)
_COUNT_TURN = (
    update(Th)
    .where(Th.c.thread_id == _K_THREAD)
    .values(turns=bindparam("v_turns"), updated_at=bindparam("v_at"))
)
_END_TURN = (
    update(Tu)
    .where(Tu.c.thread_id == _K_THREAD, Tu.c.turn == _K_TURN, Tu.c.status.in_(OPEN_TURN))
    .values(status=bindparam("v_status"), final=bindparam("v_final"), ended_at=bindparam("v_at"))
)
_MESSAGES = (
    select(M.c.message).where(M.c.thread_id == _K_THREAD, M.c.seq >= bindparam("k_from")).order_by(M.c.seq)
)
_MESSAGE_AT = select(M.c.seq).where(
    M.c.thread_id == _K_THREAD, M.c.turn == _K_TURN, M.c.idx == bindparam("k_idx")
)
_NEXT_SEQ = select(func.coalesce(func.max(M.c.seq) + 1, 0)).where(M.c.thread_id == _K_THREAD)
# One statement each where the store's dialect has INSERT … ON CONFLICT DO NOTHING (SQLite, PostgreSQL):
# a new step or message is written without first reading whether it is there (a turn writes a step and
# a message per decision and per tool call, and each statement costs more in SQLAlchemy than in SQLite).
_NEW_MESSAGE = {
    dialect.__name__.rpartition(".")[2]: dialect.insert(M)
    .values(
        thread_id=_K_THREAD, turn=_K_TURN, idx=bindparam("k_idx"), seq=_NEXT_SEQ.scalar_subquery(),
        message=bindparam("v_message"), created_at=bindparam("v_at"),
    )
    .on_conflict_do_nothing()
    .returning(M.c.seq)
    for dialect in (sqlite, postgresql)
}  # fmt: skip
_NEW_STEP = {
    dialect.__name__.rpartition(".")[2]: dialect.insert(S)
    .on_conflict_do_nothing(index_elements=["step_id"])
    .returning(S.c.step_id)
    for dialect in (sqlite, postgresql)
}  # RETURNING says what was inserted: psycopg's rowcount for ON CONFLICT DO NOTHING is -1
_STEP_FIELDS = (
    *("thread_id", "turn", "idx", "kind", "status", "tool", "args", "result", "text"),
    *("execution_id", "call_id", "updated_at"),
)
_CONTENT_FIELDS = ("kind", "status", "tool", "args", "result", "text", "execution_id", "call_id")
_STEP_CONTENT = select(*(S.c[f] for f in _CONTENT_FIELDS)).where(S.c.step_id == bindparam("k_step"))
_UPDATE_STEP = (
    update(S).where(S.c.step_id == bindparam("k_step")).values({f: bindparam(f"v_{f}") for f in _STEP_FIELDS})
)
_STEPS = select(S).where(S.c.thread_id == _K_THREAD).order_by(S.c.turn, S.c.idx)
_STEPS_OF_TURN = select(S).where(S.c.thread_id == _K_THREAD, S.c.turn == _K_TURN).order_by(S.c.idx)
_RECENT = select(Th).order_by(Th.c.updated_at.desc(), Th.c.thread_id.desc()).limit(bindparam("k_limit"))
_RECENT_BEFORE = (
    select(Th)
    .where(
        (Th.c.updated_at < bindparam("k_at"))
        | ((Th.c.updated_at == bindparam("k_at")) & (Th.c.thread_id < _K_THREAD))
    )
    .order_by(Th.c.updated_at.desc(), Th.c.thread_id.desc())
    .limit(bindparam("k_limit"))
)
_LAST_TURNS = (
    select(Tu).where(Tu.c.thread_id == _K_THREAD).order_by(Tu.c.turn.desc()).limit(bindparam("k_limit"))
)
_ALL_RUNNING = select(Tu).where(Tu.c.status == "running", Tu.c.installation == bindparam("k_installation"))
_RENAME = (
    update(Th)
    .where(Th.c.thread_id == _K_THREAD)
    .values(title=bindparam("v_title"), updated_at=bindparam("v_at"))
)


class SqlThreadStore:
    """Threads in the database (SQLite or PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.installation = db.installation

    def load(self, thread_id: str) -> ThreadState | None:
        with self.db.read() as conn:
            row = conn.execute(_LOAD, {"k_thread": thread_id}).first()
        return None if row is None else _state(row)

    def save(self, state: ThreadState) -> None:
        state.updated_at = now()
        values = {
            "title": state.title,
            "summary": state.summary,
            "folded": state.folded,
            "pending": json_or_none(state.pending),
            "turns": state.turns,
            "updated_at": state.updated_at,
        }
        with self.db.write() as conn:
            done = conn.execute(
                _SAVE,
                {"k_thread": state.thread_id, "v_at": values["updated_at"],
                 **{f"v_{k}": v for k, v in values.items() if k != "updated_at"}},
            )  # fmt: skip
            if not done.rowcount:
                conn.execute(
                    insert(Th), {"thread_id": state.thread_id, "created_at": state.created_at, **values}
                )

    def begin_turn(self, thread_id: str, message: str, owner: tuple[int, float], alive: Alive) -> int | None:
        """The next turn's number, claimed for ``owner``; None while another live process is in a turn (a
        process of another home counts as live: it is out of this home's sight)."""
        stamp = now()
        with self.db.write() as conn:
            if conn.execute(_DELETED, {"k_thread": thread_id}).first() is not None:
                raise ThreadDeleted(
                    f"thread {thread_id!r} was deleted; its id is not used again: pick another"
                )
            # Create the thread if it is new (a racer's insert is a no-op), then hold its row: on
            # PostgreSQL a row lock, on SQLite the write lock of BEGIN IMMEDIATE.
            conn.execute(_CREATE_THREAD, {"id": thread_id, "title": title_of(message), "at": stamp})
            # A thread made before its first message (the page's "new thread") is named by that message.
            conn.execute(_NAME_UNTITLED, {"k_thread": thread_id, "v_title": title_of(message)})
            turns = int(conn.execute(_TURNS_OF if self.db.is_sqlite else _TURNS_OF_LOCKED,
                                     {"k_thread": thread_id}).scalar_one())  # fmt: skip
            for busy in conn.execute(_RUNNING, {"k_thread": thread_id}).all():
                m = busy._mapping
                if not self.installation.owns_here(m["installation"], m["host"]):
                    return None  # another home's or node's turn: whether its process lives is seen there
                if m["owner_pid"] is not None and alive(m["owner_pid"], m["owner_create_time"] or 0.0):
                    return None
                conn.execute(_INTERRUPT_TURN, {"k_thread": thread_id, "k_turn": m["turn"], "v_at": stamp})
            turn = turns + 1
            conn.execute(_COUNT_TURN, {"k_thread": thread_id, "v_turns": turn, "v_at": stamp})
            conn.execute(
                insert(Tu),
                {
                    "thread_id": thread_id,
                    "turn": turn,
                    "status": "running",
                    "message": message,
                    "final": "",
                    "owner_pid": owner[0],
                    "owner_create_time": owner[1],
                    "started_at": stamp,
                    **self.installation.values(),
                },
            )
        return turn

    def end_turn(
        self, thread_id: str, turn: int, status: str, final: str, event: Event | None = None
    ) -> bool:
        """End an open (running or interrupted) turn, with its event; False if it had ended already (a
        replayed turn ends once)."""
        with self.db.write() as conn:
            moved = conn.execute(
                _END_TURN,
                {"k_thread": thread_id, "k_turn": turn, "v_status": status, "v_final": final, "v_at": now()},
            ).rowcount
            if moved and event is not None:
                append_event(conn, event)
        return bool(moved)

    def hold_turn(self, thread_id: str, turn: int, owner: tuple[int, float]) -> bool:
        """Make ``owner`` the process of a running turn of this home (an executor resuming it after a
        crash); False when the turn is not running any more (another process recovered it meanwhile),
        or is another home's."""
        values = {"k_thread": thread_id, "k_turn": turn, "v_pid": owner[0], "v_ct": owner[1]}
        with self.db.write() as conn:
            moved = conn.execute(_HOLD_TURN, {**values, "k_installation": self.installation.id}).rowcount
        return bool(moved)

    def turn(self, thread_id: str, turn: int) -> TurnRecord | None:
        with self.db.read() as conn:
            row = conn.execute(_ONE_TURN, {"k_thread": thread_id, "k_turn": turn}).first()
        return None if row is None else _turn(row)

    def turns_with_status(self, thread_id: str, status: str) -> list[TurnRecord]:
        with self.db.read() as conn:
            return [
                _turn(row) for row in conn.execute(_TURNS_WITH, {"k_thread": thread_id, "k_status": status})
            ]

    def messages(self, thread_id: str, *, from_seq: int = 0) -> list[dict[str, Any]]:
        with self.db.read() as conn:
            rows = conn.execute(_MESSAGES, {"k_thread": thread_id, "k_from": from_seq}).scalars()
            return [json.loads(value) for value in rows]

    def append(self, thread_id: str, turn: int, index: int, message: dict[str, Any]) -> bool:
        """Add a message at (turn, index); False if one is there already (a replay)."""
        with self.db.write() as conn:
            return self._append(conn, thread_id, turn, index, message)

    @staticmethod
    def _append(conn: Any, thread_id: str, turn: int, index: int, message: dict[str, Any]) -> bool:
        key = {"k_thread": thread_id, "k_turn": turn, "k_idx": index}
        text_ = json.dumps(message, ensure_ascii=False)
        new = _NEW_MESSAGE.get(conn.dialect.name)
        if new is not None:  # False: a replay of a message already on record
            return conn.execute(new, {**key, "v_message": text_, "v_at": now()}).first() is not None
        if conn.execute(_MESSAGE_AT, key).first() is not None:
            return False
        seq = conn.execute(_NEXT_SEQ, {"k_thread": thread_id}).scalar()
        row = {
            "thread_id": thread_id,
            "turn": turn,
            "idx": index,
            "seq": seq,
            "message": text_,
            "created_at": now(),
        }
        conn.execute(insert(M), row)
        return True

    def record_step(
        self, step: StepRecord, event: Event | None = None, message: dict[str, Any] | None = None
    ) -> int:
        """Record (or update) a step, its event and the message it adds to the conversation (keyed by
        the step: index + 1), in one transaction; returns the event's id (0 without an event), or
        ``REPLAYED`` when the step is on record as given already, or further (a replayed turn: nothing
        is written, no event is sent twice)."""
        values = {
            "thread_id": step.thread_id,
            "turn": step.turn,
            "idx": step.index,
            "kind": step.kind,
            "status": step.status,
            "tool": step.tool,
            "args": json_or_none(step.args),
            "result": json_or_none(step.result),
            "text": step.text,
            "execution_id": step.execution_id,
            "call_id": step.call_id,
            "updated_at": now(),
        }
        with self.db.write() as conn:
            new = _NEW_STEP.get(conn.dialect.name)
            row = {"step_id": step.step_id, "created_at": step.created_at, **values}
            if new is None or conn.execute(new, row).first() is None:  # on record: a change, or a replay
                known = conn.execute(_STEP_CONTENT, {"k_step": step.step_id}).first()
                if known is not None and not is_news(tuple(known), step_content(step)):
                    return REPLAYED
                done = conn.execute(
                    _UPDATE_STEP, {"k_step": step.step_id, **{f"v_{k}": v for k, v in values.items()}}
                )
                if not done.rowcount:
                    conn.execute(insert(S), row)
            if message is not None:
                self._append(conn, step.thread_id, step.turn, step.index + 1, message)
            return 0 if event is None else append_event_now(conn, event)

    def steps(self, thread_id: str, turn: int | None = None) -> list[StepRecord]:
        with self.db.read() as conn:
            if turn is None:
                rows = conn.execute(_STEPS, {"k_thread": thread_id}).all()
            else:
                rows = conn.execute(_STEPS_OF_TURN, {"k_thread": thread_id, "k_turn": turn}).all()
        return [
            StepRecord(
                thread_id=m["thread_id"],
                turn=m["turn"],
                index=m["idx"],
                kind=m["kind"],
                status=m["status"],
                tool=m["tool"],
                args=_loads(m["args"]),
                result=_loads(m["result"]),
                text=m["text"],
                execution_id=m["execution_id"],
                call_id=m["call_id"],
                created_at=m["created_at"],
            )
            for m in (row._mapping for row in rows)
        ]

    def threads(self, limit: int = 50, before: tuple[str, str] | None = None) -> list[ThreadState]:
        """Newest first (by last change); ``before`` is the (updated_at, thread_id) of the last thread of
        the previous page."""
        with self.db.read() as conn:
            if before is None:
                rows = conn.execute(_RECENT, {"k_limit": limit}).all()
            else:
                at, thread_id = before
                rows = conn.execute(
                    _RECENT_BEFORE, {"k_limit": limit, "k_at": at, "k_thread": thread_id}
                ).all()
        return [_state(row) for row in rows]

    def turns(self, thread_id: str, limit: int = 500) -> list[TurnRecord]:
        """The thread's last ``limit`` turns, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(_LAST_TURNS, {"k_thread": thread_id, "k_limit": limit}).all()
        return sorted((_turn(row) for row in rows), key=lambda t: t.turn)

    def rename(self, thread_id: str, title: str) -> bool:
        with self.db.write() as conn:
            moved = conn.execute(_RENAME, {"k_thread": thread_id, "v_title": title, "v_at": now()}).rowcount
        return bool(moved)

    def interrupt_orphans(
        self, alive: Alive, spare: Collection[str] = (), only: str | None = None
    ) -> list[tuple[str, int]]:
        """Mark ``interrupted`` every running turn of this home (of thread ``only``, if given) whose
        process is dead, except on the threads in ``spare`` (a durable workflow will resume those). The
        next turn on each thread settles it. The (thread, turn) pairs marked. Another home's turns, and
        another node's, are their own to settle: whether their process lives cannot be seen from here."""
        marked: list[tuple[str, int]] = []
        stamp = now()
        with self.db.write() as conn:
            for row in conn.execute(_ALL_RUNNING, {"k_installation": self.installation.id}).all():
                m = row._mapping
                if m["thread_id"] in spare or (only is not None and m["thread_id"] != only):
                    continue
                if m["host"] != self.installation.host:
                    continue  # another node's: its process is out of this host's sight
                if m["owner_pid"] is not None and alive(m["owner_pid"], m["owner_create_time"] or 0.0):
                    continue
                conn.execute(
                    _INTERRUPT_TURN, {"k_thread": m["thread_id"], "k_turn": m["turn"], "v_at": stamp}
                )
                marked.append((m["thread_id"], m["turn"]))
        return marked

    def ids_with_prefix(self, prefix: str, limit: int = 5) -> list[str]:
        query = select(Th.c.thread_id).where(Th.c.thread_id.startswith(prefix, autoescape=True))
        with self.db.read() as conn:
            return list(conn.execute(query.order_by(Th.c.thread_id).limit(limit)).scalars())

    def emit(self, event: Event) -> Event:
        with self.db.write() as conn:
            event_id = append_event_now(conn, event)
        return event.model_copy(update={"id": event_id})

    def forget(self, thread_id: str) -> None:
        """Delete the thread's records; its id is never given out again (``ThreadDeleted``)."""
        with self.db.write() as conn:
            for table in (M, S, Tu):
                conn.execute(delete(table).where(table.c.thread_id == thread_id))
            conn.execute(delete(Th).where(Th.c.thread_id == thread_id))
            if conn.execute(_DELETED, {"k_thread": thread_id}).first() is None:
                conn.execute(insert(D), {"thread_id": thread_id, "deleted_at": now()})

    def assign(self, thread_id: str, agent: str | None, parent: str | None = None) -> None:
        """The thread (created if new) belongs to ``agent``; ``ConfigError`` if it began with another."""
        stamp = now()
        with self.db.write() as conn:
            if conn.execute(_DELETED, {"k_thread": thread_id}).first() is not None:
                raise ThreadDeleted(
                    f"thread {thread_id!r} was deleted; its id is not used again: pick another"
                )
            conn.execute(_CREATE_THREAD, {"id": thread_id, "title": "", "at": stamp})
            row = conn.execute(_LOAD, {"k_thread": thread_id}).first()
            state = _state(row)
            check_assign(state, agent, parent)
            if (state.agent, state.parent) != (agent, parent or state.parent):
                conn.execute(
                    update(Th)
                    .where(Th.c.thread_id == thread_id)
                    .values(agent=agent, parent=parent or state.parent)
                )

    def post(
        self, thread_id: str, agent: str, said: str, title: str, event: Callable[[int], Event] | None = None
    ) -> int | None:
        """Post ``agent``'s proactive message in ``thread_id`` (created, as ``agent``'s, if new): a turn
        of its own, ended as it begins, holding one assistant message — what the person and the model
        read in the thread. None while a turn is under way there: a message never lands between a
        turn's messages (the caller tries again later)."""
        stamp = now()
        with self.db.write() as conn:
            if conn.execute(_DELETED, {"k_thread": thread_id}).first() is not None:
                raise ThreadDeleted(
                    f"thread {thread_id!r} was deleted; its id is not used again: pick another"
                )
            conn.execute(_CREATE_THREAD, {"id": thread_id, "title": title, "at": stamp})
            conn.execute(
                update(Th).where(Th.c.thread_id == thread_id, Th.c.agent.is_(None)).values(agent=agent)
            )
            turns = int(conn.execute(_TURNS_OF if self.db.is_sqlite else _TURNS_OF_LOCKED,
                                     {"k_thread": thread_id}).scalar_one())  # fmt: skip
            if conn.execute(_RUNNING, {"k_thread": thread_id}).first() is not None:
                return None
            turn = turns + 1
            conn.execute(_COUNT_TURN, {"k_thread": thread_id, "v_turns": turn, "v_at": stamp})
            conn.execute(
                insert(Tu),
                {"thread_id": thread_id, "turn": turn, "status": PROACTIVE, "message": "", "final": said,
                 "owner_pid": None, "owner_create_time": None, "started_at": stamp, "ended_at": stamp,
                 **self.installation.values()},
            )  # fmt: skip
            self._append(conn, thread_id, turn, 0, {"role": "assistant", "content": said})
            if event is not None:  # in the same transaction: a posted message is always told
                append_event(conn, event(turn))
        return turn

    def set_private(self, thread_id: str, private: bool) -> bool:
        """Mark the thread private (nothing from it is remembered) or not; False if there is no such
        thread."""
        with self.db.write() as conn:
            done = conn.execute(
                update(Th).where(Th.c.thread_id == thread_id).values(private=1 if private else 0)
            )
        return bool(done.rowcount)

    def deleted(self, thread_id: str) -> bool:
        with self.db.read() as conn:
            return conn.execute(_DELETED, {"k_thread": thread_id}).first() is not None


def _state(row: Any) -> ThreadState:
    m = row._mapping
    return ThreadState(
        thread_id=m["thread_id"],
        title=m["title"],
        summary=m["summary"],
        folded=m["folded"],
        pending=_loads(m["pending"]),
        turns=m["turns"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        agent=m["agent"],
        parent=m["parent"],
        private=bool(m["private"]),
    )


def _turn(row: Any) -> TurnRecord:
    m = row._mapping
    return TurnRecord(
        thread_id=m["thread_id"],
        turn=m["turn"],
        status=m["status"],
        message=m["message"],
        final=m["final"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
        installation=m["installation"],
        host=m["host"],
    )
