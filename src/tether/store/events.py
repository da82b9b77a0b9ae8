"""The persisted event log: append inside the transaction that made the change, read or stream from
any id onward, from any process.

Ids only grow, in commit order: SQLite serializes writers (``BEGIN IMMEDIATE``), and on PostgreSQL
a transaction that appends takes a transaction-scoped advisory lock first, so an id is never handed to
a transaction that commits after one with a larger id (a reader that resumes "after id N" misses
nothing). A write transaction's events go in last, just before its commit, in one statement, which
takes the lock too: the lock is the last one it takes, after the rows it changed.

Every home on the database reads the whole log; each event records the installation (tether home) that
wrote it, and a home's retention counts and removes only its own.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, text

from tether.events import EVENT, Event
from tether.store import fast, schema
from tether.store.database import BEFORE_COMMIT, INSTALLATION_OPTION, Database

E = schema.events
log = logging.getLogger("tether.events")
STREAM_POLL_S = 0.05
EVENTS_LOCK = 7412
_INSERT = insert(E)
# With RETURNING, SQLAlchemy sends several rows as one statement (its ids are not needed: without
# ``sort_by_parameter_order``, which SQLite would have sent row by row).
_INSERT_MANY = insert(E).returning(E.c.id)
_LOCKED_IN = "tether_events_locked_in"  # the connection's transaction that holds the lock
LOCKED_ROWS = 32  # the most rows inserted with the lock in one statement (the rest follow, locked)


def append_event(conn: Any, event: Event) -> None:
    """Append ``event`` in the caller's write transaction (``Database.write``, which names the
    installation it writes for). Its events go in last, just before the commit, in the order appended
    and in one statement (the event log's lock is then taken after every row the transaction writes)."""
    row = _row(conn, event)
    if not conn.get_execution_options().get("tether_write"):
        _insert(conn, [row])
        return
    transaction = conn.get_transaction()
    deferred = conn.info.get(BEFORE_COMMIT)
    if not isinstance(deferred, _Deferred) or deferred.transaction is not transaction:
        deferred = conn.info[BEFORE_COMMIT] = _Deferred(transaction)
    deferred.rows.append(row)


def append_event_now(conn: Any, event: Event) -> int:
    """``append_event`` at once (after the transaction's events so far): its id."""
    deferred = conn.info.pop(BEFORE_COMMIT, None)
    if isinstance(deferred, _Deferred) and deferred.transaction is conn.get_transaction():
        deferred(conn)
    return _insert(conn, [_row(conn, event)])[0]


class _Deferred:
    """A write transaction's events, appended when it is about to commit."""

    def __init__(self, transaction: Any) -> None:
        self.transaction = transaction
        self.rows: list[dict[str, Any]] = []

    def __call__(self, conn: Any) -> None:
        _insert(conn, self.rows)


def _insert(conn: Any, rows: list[dict[str, Any]]) -> list[int]:
    """``rows`` in the log, in one statement; their ids. On PostgreSQL the log's lock comes first: in the
    same statement, the first time in a transaction."""
    transaction = conn.get_transaction()
    ids: list[Any] = []
    if conn.dialect.name == "postgresql" and conn.info.get(_LOCKED_IN) is not transaction:
        first, rows = rows[:LOCKED_ROWS], rows[LOCKED_ROWS:]  # the rest, if any, once the lock is held
        numbered = {f"{key}_{i}": value for i, row in enumerate(first) for key, value in row.items()}
        ids += [row[0] for row in fast.execute(conn, _locked(len(first)), {**numbered, "key": EVENTS_LOCK})]
        conn.info[_LOCKED_IN] = transaction
    if len(rows) == 1:
        ids.append(conn.execute(_INSERT, rows[0]).inserted_primary_key[0])
    elif rows:  # SQLAlchemy's "insertmanyvalues": one INSERT … VALUES (…), (…) on both databases
        ids += conn.execute(_INSERT_MANY, rows).scalars().all()
    return [int(i) for i in ids]


@functools.cache  # one statement per number of rows, up to LOCKED_ROWS
def _locked(n: int) -> Any:
    """PostgreSQL: ``n`` rows inserted after the event log's transaction-scoped lock, in one statement.
    The lock is the filter on the rows, which the server applies to a row before it computes the row's
    columns: it is held before the first id is drawn from the sequence."""
    rows = ", ".join(f"(:ts_{i}, :kind_{i}, :topic_{i}, :payload_{i}, :installation_{i})" for i in range(n))
    return text(
        f"INSERT INTO events (ts, kind, topic, payload, installation) SELECT * FROM (VALUES {rows})"
        " AS v(ts, kind, topic, payload, installation) WHERE pg_advisory_xact_lock(:key) IS NOT NULL"
        " RETURNING id"
    )


def _row(conn: Any, event: Event) -> dict[str, Any]:
    # Fields at their defaults are left out (a reader's validation puts them back): most of an event.
    payload = event.model_dump(mode="json", exclude={"id", "ts", "topic", "kind"}, exclude_defaults=True)
    return {
        "ts": event.ts,
        "kind": event.kind,
        "topic": event.topic,
        "payload": json.dumps(payload, ensure_ascii=False),
        "installation": conn.get_execution_options().get(INSTALLATION_OPTION),
    }


def _event(row: Any) -> Event | None:
    """The event of a row; None (logged) for one this version cannot read — written by a newer tether,
    or damaged — so one bad row never stops every reader at it."""
    m = row._mapping
    try:
        return EVENT.validate_python(
            {"id": m["id"], "ts": m["ts"], "kind": m["kind"], "topic": m["topic"], **json.loads(m["payload"])}
        )
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        log.warning(
            "event %s (%s) skipped: this tether cannot read it: %s", m["id"], m["kind"], str(exc)[:200]
        )
        return None


class EventLog:
    """Reading the event log of one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def append(self, event: Event) -> Event:
        with self.db.write() as conn:
            event_id = append_event_now(conn, event)
        return event.model_copy(update={"id": event_id})

    def read(
        self,
        after: int = 0,
        *,
        limit: int = 500,
        topics: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        mine: bool = False,
    ) -> list[Event]:
        """Events with an id greater than ``after``, oldest first (only this home's with ``mine``)."""
        return self.page(after, limit=limit, topics=topics, kinds=kinds, mine=mine)[0]

    def page(
        self,
        after: int = 0,
        *,
        limit: int = 500,
        topics: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        mine: bool = False,
    ) -> tuple[list[Event], int | None]:
        """``read``, and the id of the last row it scanned when it scanned ``limit`` of them (None when
        it reached the log's end): how far a reader has read, though rows this version cannot read are
        left out of the events."""
        query = select(E).where(E.c.id > after)
        if mine:
            query = query.where(E.c.installation == self.db.installation.id)
        if topics is not None:
            query = query.where(E.c.topic.in_(list(topics)))
        if kinds is not None:
            query = query.where(E.c.kind.in_(list(kinds)))
        with self.db.read() as conn:
            rows = conn.execute(query.order_by(E.c.id).limit(limit)).all()
        events = [event for event in map(_event, rows) if event is not None]
        return events, (int(rows[-1]._mapping["id"]) if len(rows) == limit else None)

    def last_id(self) -> int:
        with self.db.read() as conn:
            return int(conn.execute(select(func.max(E.c.id))).scalar() or 0)

    async def stream(
        self,
        after: int = 0,
        *,
        topics: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        poll_s: float = STREAM_POLL_S,
    ) -> AsyncIterator[Event]:
        """Every event after ``after`` as it is committed, by any process, until the caller stops.

        Another process's commits give nothing to await, so the table is polled (off the event loop).
        """
        while True:
            batch = await asyncio.to_thread(self.read, after, topics=topics, kinds=kinds)
            for event in batch:
                after = event.id
                yield event
            if not batch:
                await asyncio.sleep(poll_s)

    def prune(self, *, before_ts: float, keep: int) -> int:
        """Delete this installation's events older than ``before_ts`` beyond its newest ``keep``; returns
        how many. Another home's events are its own to count and remove."""
        mine = E.c.installation == self.db.installation.id
        with self.db.write() as conn:
            floor = conn.execute(select(E.c.id).where(mine).order_by(E.c.id.desc()).offset(keep).limit(1))
            last = floor.scalar()
            if last is None:
                return 0
            result = conn.execute(delete(E).where(mine, E.c.id <= last, E.c.ts < before_ts))
            return int(result.rowcount or 0)


def now_ts() -> float:
    return time.time()
