"""The event log, on SQLite and on PostgreSQL: typed, monotonic, streamable from another process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from tests.support.helpers import ROOT
from tether.events import EVENT, JobStateChanged, ToolProgress, TurnFinished
from tether.store.database import Database
from tether.store.events import EventLog


def test_events_are_a_typed_union(open_db: Callable[[], Database]) -> None:
    log = EventLog(open_db())
    stored = log.append(JobStateChanged(topic="job:e1", execution_id="e1", task_id="t.x", status="running"))
    [read] = log.read()
    assert read == stored and isinstance(read, JobStateChanged) and read.id > 0
    with pytest.raises(ValidationError):
        EVENT.validate_python({"kind": "no_such_kind", "topic": "x"})


def test_ids_only_grow_in_commit_order_under_concurrent_writers(open_db: Callable[[], Database]) -> None:
    logs = [EventLog(open_db()) for _ in range(6)]
    barrier = threading.Barrier(len(logs))

    def write(log: EventLog, n: int) -> None:
        barrier.wait()
        for i in range(20):
            log.append(ToolProgress(topic=f"job:{n}", execution_id=str(n), message=str(i)))

    workers = [threading.Thread(target=write, args=(log, n)) for n, log in enumerate(logs)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    ids = [e.id for e in logs[0].read(limit=1000)]
    assert ids == sorted(ids) and len(set(ids)) == 120
    # A reader that resumes after any id sees exactly the rest.
    assert [e.id for e in logs[0].read(after=ids[59], limit=1000)] == ids[60:]


WRITER = """
import sys
from tether.events import TurnFinished
from tether.store.database import Database
from tether.store.events import EventLog
log = EventLog(Database(sys.argv[1], installation="7e57000000000001"))
for i in range(5):
    event = TurnFinished(topic="thread:x", thread_id="x", turn=i, index=0, status="completed", final=str(i))
    log.append(event)
"""


def test_a_stream_sees_what_another_process_writes(
    database_url: str, open_db: Callable[[], Database]
) -> None:
    log = EventLog(open_db())
    log.append(ToolProgress(topic="job:before", execution_id="before"))
    start = log.last_id()

    async def follow() -> list[str]:
        seen: list[str] = []
        writer = subprocess.Popen([sys.executable, "-c", WRITER, database_url], cwd=ROOT)  # noqa: ASYNC220
        async for event in log.stream(after=start, topics=["thread:x"], poll_s=0.01):
            assert isinstance(event, TurnFinished)
            seen.append(event.final)
            if len(seen) == 5:
                break
        assert writer.wait(timeout=60) == 0
        return seen

    assert asyncio.run(asyncio.wait_for(follow(), 60)) == ["0", "1", "2", "3", "4"]


def test_pruning_keeps_the_newest(open_db: Callable[[], Database]) -> None:
    log = EventLog(open_db())
    for i in range(10):
        log.append(ToolProgress(topic="job:p", execution_id="p", message=str(i)))
    assert log.prune(before_ts=float("inf"), keep=3) == 7
    assert [e.message for e in log.read()] == ["7", "8", "9"]  # type: ignore[union-attr]


def test_a_row_this_version_cannot_read_is_skipped_not_fatal(open_db: Callable[[], Database]) -> None:
    """A newer tether (or damage) wrote an event kind this one does not know: readers step over it."""
    from sqlalchemy import insert

    from tether.events import RunChanged
    from tether.store import schema

    db = open_db()
    log = EventLog(db)
    first = log.append(RunChanged(topic="run:r", run_id="r", status="running"))
    with db.write() as conn:
        conn.execute(
            insert(schema.events), {"ts": 0.0, "kind": "from_the_future", "topic": "run:r", "payload": "{}"}
        )
    last = log.append(RunChanged(topic="run:r", run_id="r", status="completed"))
    assert [e.id for e in log.read(0)] == [first.id, last.id]
    assert [e.id for e in log.read(first.id, topics=["run:r"])] == [last.id]


def test_each_home_keeps_and_prunes_only_its_own_events(
    open_db: Callable[[], Database], database_url: str
) -> None:
    """Two homes on one database read one log; one's retention never removes the other's history."""
    ours = EventLog(open_db())
    other_db = Database(database_url, installation="0123456789abcdef")
    try:
        theirs = EventLog(other_db)

        def event(n: int) -> TurnFinished:
            return TurnFinished(
                topic="thread:x", thread_id="x", turn=n, index=0, status="completed", final=""
            )

        for n in range(4):
            theirs.append(event(n))
            ours.append(event(n))
        assert len(ours.read()) == 8  # one log for everyone
        assert ours.prune(before_ts=float("inf"), keep=1) == 3
        assert [e.id for e in theirs.read()] == [e.id for e in ours.read()]
        assert len(ours.read()) == 5
        assert theirs.prune(before_ts=float("inf"), keep=0) == 4
        assert len(ours.read()) == 1
    finally:
        other_db.close()


def test_a_writer_draws_no_id_while_another_holds_the_logs_lock(open_db: Callable[[], Database]) -> None:
    """PostgreSQL: the log's lock is taken in the statement that inserts the events, before the first
    row's id is drawn. A second writer waits for it without drawing an id, so it never commits an id
    smaller than one committed after it (which a reader resuming after that id would miss)."""
    from sqlalchemy import text

    from tether.store.events import append_event_now

    db = open_db()
    if db.is_sqlite:
        pytest.skip("SQLite has one writer at a time: its ids follow the commits")
    other = EventLog(open_db())
    watch = open_db()
    done: list[int] = []
    with db.write() as conn:
        held = append_event_now(conn, ToolProgress(topic="job:a", execution_id="a", message="first"))
        pid = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        writer = threading.Thread(
            target=lambda: done.append(
                other.append(ToolProgress(topic="job:b", execution_id="b", message="second")).id or 0
            )
        )
        writer.start()
        deadline = time.monotonic() + 30
        while True:  # the other writer is seen waiting for the lock this transaction holds
            with watch.read() as seen:
                waiting = seen.execute(
                    text(
                        "SELECT count(*) FROM pg_locks w JOIN pg_locks h ON h.locktype = 'advisory'"
                        " AND h.objid = w.objid AND h.granted AND h.pid = :pid"
                        " WHERE w.locktype = 'advisory' AND NOT w.granted"
                    ),
                    {"pid": pid},
                ).scalar_one()
                drawn = seen.execute(text("SELECT last_value FROM events_id_seq")).scalar_one()
            if waiting:
                break
            assert time.monotonic() < deadline, "the second writer never waited for the log's lock"
            time.sleep(0.01)
        assert drawn == held  # it waits without an id
    writer.join(30)
    assert done and done[0] > held


def test_many_events_of_one_transaction_all_go_in_after_the_lock(open_db: Callable[[], Database]) -> None:
    """Found in review: a transaction's events went in as one statement of five parameters a row,
    whatever their number (PostgreSQL takes at most 65,535), each number of rows a statement of its own.
    The first ``LOCKED_ROWS`` go in with the lock, the rest after it."""
    from tether.store.events import LOCKED_ROWS, append_event

    db = open_db()
    log = EventLog(db)
    n = LOCKED_ROWS * 2 + 5
    with db.write() as conn:
        for i in range(n):
            append_event(conn, ToolProgress(topic="job:many", execution_id="many", message=str(i)))
    got = [e for e in log.read(limit=1000) if isinstance(e, ToolProgress)]
    assert sorted(int(e.message) for e in got) == list(range(n))
    assert len({e.id for e in got}) == n
