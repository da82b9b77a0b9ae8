"""The job table, on SQLite and on PostgreSQL: the state machine holds under concurrent writers."""

import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import TEST_INSTALLATION
from tests.support.helpers import wait_for
from tether.errors import StoreError
from tether.store.database import Database
from tether.store.events import EventLog
from tether.store.jobs import ConfirmationUsed, SqlJobStore
from tether.store.migrations import MIGRATIONS
from tether.tasks.result import TaskResult, TaskStatus


def result(status: TaskStatus, message: str = "", eid: str = "e1") -> TaskResult:
    return TaskResult(task_id="t.x", execution_id=eid, status=status, message=message)


@pytest.fixture
def store(open_db: Callable[[], Database]) -> SqlJobStore:
    return SqlJobStore(open_db())


def test_sqlite_store_is_wal_with_foreign_keys_and_migrated(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 't.db'}", installation=TEST_INSTALLATION)
    with db.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA user_version").scalar() == len(MIGRATIONS)
    db.close()
    Database(
        f"sqlite:///{tmp_path / 't.db'}", installation=TEST_INSTALLATION
    ).close()  # re-opening migrates nothing and fails nothing
    assert (tmp_path / "t.db").stat().st_mode & 0o777 == 0o600


def test_a_newer_schema_is_refused_with_advice(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    conn.close()
    with pytest.raises(StoreError, match="upgrade tether"):
        Database(f"sqlite:///{tmp_path / 't.db'}", installation=TEST_INSTALLATION)


def test_a_store_from_the_previous_version_is_migrated_keeping_its_rows(tmp_path: Path) -> None:
    """A home written before SQLAlchemy (user_version 3, messages keyed by seq) opens and keeps its data."""
    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    for script in MIGRATIONS[:3]:
        assert isinstance(script, str)  # (the early ones are the same in both dialects)
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 3")
    conn.execute("INSERT INTO threads VALUES ('th', 't', '', 0, NULL, 1, 'x', 'x')")
    for seq, text in enumerate(["hi", "hello"]):
        conn.execute("INSERT INTO messages VALUES ('th', ?, 1, ?, 'x')", (seq, f'{{"content": "{text}"}}'))
    conn.commit()
    conn.close()
    from tether.store.threads_sql import SqlThreadStore

    db = Database(f"sqlite:///{path}", installation=TEST_INSTALLATION)
    threads = SqlThreadStore(db)
    assert [m["content"] for m in threads.messages("th")] == ["hi", "hello"]
    threads.append("th", 2, 0, {"content": "again"})
    assert [m["content"] for m in threads.messages("th", from_seq=1)] == ["hello", "again"]
    db.close()


def test_transitions_follow_the_state_machine(store: SqlJobStore) -> None:
    store.insert(result(TaskStatus.PENDING), caller="cli", params={"a": 1}, resources=("automation",))
    assert store.transition(result(TaskStatus.RUNNING)).status is TaskStatus.RUNNING
    assert store.transition(result(TaskStatus.COMPLETED, "done")).status is TaskStatus.COMPLETED
    after = store.transition(result(TaskStatus.STOPPED, "late"))
    assert after.status is TaskStatus.COMPLETED and after.message == "done" and after.ended_at


def test_concurrent_writers_never_overwrite_a_terminal_state(open_db: Callable[[], Database]) -> None:
    first = SqlJobStore(open_db())
    first.insert(result(TaskStatus.PENDING), caller="cli", params={})
    first.transition(result(TaskStatus.RUNNING))
    finals = [TaskStatus.COMPLETED, TaskStatus.STOPPED, TaskStatus.FAILED] * 4
    stores = [SqlJobStore(open_db()) for _ in finals]
    barrier = threading.Barrier(len(finals))

    def write(store: SqlJobStore, status: TaskStatus) -> None:
        barrier.wait()
        store.transition(result(status, status.value))

    threads = [threading.Thread(target=write, args=pair) for pair in zip(stores, finals, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    record = first.get("e1")
    assert record is not None and record.status.terminal and record.message == record.status.value
    # Exactly one terminal state made it into the event stream too.
    log = EventLog(first.db)
    states = [e.status for e in log.read(topics=["job:e1"])]  # type: ignore[union-attr]
    assert states == ["pending", "running", record.status.value]


def test_list_active_newest_first_and_paged(store: SqlJobStore) -> None:
    for i, status in enumerate([TaskStatus.COMPLETED, TaskStatus.RUNNING, TaskStatus.PENDING]):
        store.insert(result(status, eid=f"e{i}"), caller="cli", params={})
    assert [r.execution_id for r in store.list()] == ["e2", "e1", "e0"]
    assert [r.execution_id for r in store.list(active=True)] == ["e2", "e1"]
    assert [r.execution_id for r in store.list(limit=1, before="e2")] == ["e1"]
    assert [r.execution_id for r in store.list(task_ids=[])] == []


def test_a_result_published_after_an_unobserved_running_is_adopted(store: SqlJobStore) -> None:
    store.insert(result(TaskStatus.PENDING), caller="cli", params={})
    assert store.transition(result(TaskStatus.COMPLETED, "quick")).status is TaskStatus.COMPLETED


def test_a_confirmation_authorizes_one_execution(store: SqlJobStore) -> None:
    store.insert(result(TaskStatus.PENDING, eid="a"), caller="cli", params={}, confirmation="nonce-1")
    with pytest.raises(ConfirmationUsed) as used:
        store.insert(result(TaskStatus.PENDING, eid="b"), caller="cli", params={}, confirmation="nonce-1")
    assert used.value.execution_id == "a" and store.get("b") is None


def test_an_id_on_record_is_inserted_once(store: SqlJobStore) -> None:
    assert store.insert(result(TaskStatus.PENDING), caller="cli", params={}, if_absent=True)
    assert not store.insert(result(TaskStatus.REJECTED), caller="cli", params={}, if_absent=True)
    record = store.get("e1")
    assert record is not None and record.status is TaskStatus.PENDING


def test_retention_forgets_only_ended_jobs(store: SqlJobStore) -> None:
    store.insert(result(TaskStatus.COMPLETED, eid="old"), caller="cli", params={})
    store.insert(result(TaskStatus.RUNNING, eid="live"), caller="cli", params={})
    store.insert(result(TaskStatus.FAILED, eid="new"), caller="cli", params={})
    assert store.ended_before("9999", keep=1, limit=10) == ["old", "new"]
    assert store.ended_before("0000", keep=1, limit=10) == ["old"]  # beyond the newest one kept
    assert store.forget(["old", "live"]) == 1
    assert store.get("old") is None and store.get("live") is not None


def test_retention_forgets_what_other_nodes_asked_of_a_job_with_it(store: SqlJobStore) -> None:
    from tether.store.workers import WorkerStore

    peers = WorkerStore(store.db)
    for eid in ("old", "live"):
        store.insert(result(TaskStatus.RUNNING, eid=eid), caller="cli", params={})
        peers.request_stop(eid, "stop it", "other-node")
        peers.publish_tail(eid, "last lines")
    store.transition(result(TaskStatus.STOPPED, eid="old"))
    assert store.forget(["old", "live"]) == 1
    assert peers.tail("old") == (None, None)  # gone with its job, not left behind for ever
    assert peers.tail("live")[0] == "last lines"
    assert [eid for eid, _ in peers.stops_here()] == ["live"]


def test_an_unusable_database_url_is_a_clear_error(tmp_path: Path) -> None:
    for url, match in [
        ("mysql://x/y", "SQLite or PostgreSQL"),
        ("not a url", "not valid"),
        (f"sqlite:///{tmp_path}", "a folder"),
        ("postgresql+psycopg://nobody@127.0.0.1:1/none", "cannot be opened"),
    ]:
        with pytest.raises(StoreError, match=match):
            Database(url, installation=TEST_INSTALLATION, busy_timeout_s=1)


OTHER_INSTALLATION = "0123456789abcdef"


@pytest.fixture
def other_db(database_url: str) -> Iterator[Database]:
    """The same database, opened for another tether home (another host, say)."""
    db = Database(database_url, installation=OTHER_INSTALLATION)
    yield db
    db.close()


def test_a_job_records_the_installation_and_host_that_own_it(store: SqlJobStore) -> None:
    store.insert(result(TaskStatus.PENDING), caller="cli", params={})
    record = store.get("e1")
    assert record is not None
    assert (record.installation, record.host) == (TEST_INSTALLATION, socket.gethostname())


def test_each_installation_recovers_counts_keeps_and_forgets_only_its_own_jobs(
    store: SqlJobStore, other_db: Database
) -> None:
    other = SqlJobStore(other_db)
    store.insert(result(TaskStatus.RUNNING, eid="mine-live"), caller="cli", params={})
    other.insert(result(TaskStatus.RUNNING, eid="theirs-live"), caller="cli", params={})
    other.insert(result(TaskStatus.COMPLETED, eid="theirs-old"), caller="cli", params={})
    store.insert(result(TaskStatus.COMPLETED, eid="mine-old"), caller="cli", params={})
    store.insert(result(TaskStatus.FAILED, eid="mine-new"), caller="cli", params={})

    assert [r.execution_id for r in store.list(active=True, mine=True)] == ["mine-live"]
    assert {r.execution_id for r in store.list(active=True)} == {"mine-live", "theirs-live"}  # listed
    assert [r.execution_id for r in other.list(mine=True)] == ["theirs-old", "theirs-live"]
    # Retention counts this installation's ended jobs only: theirs neither fill its quota nor go.
    assert store.ended_before("9999", keep=1, limit=10) == ["mine-old", "mine-new"]
    assert store.ended_before("0000", keep=1, limit=10) == ["mine-old"]
    assert store.forget(["theirs-old", "mine-old"]) == 1
    assert store.get("theirs-old") is not None and store.get("mine-old") is None
    assert other.ended_before("0000", keep=0, limit=10) == ["theirs-old"]


def test_a_store_migrated_to_owners_gives_its_rows_to_the_home_that_migrates_it(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conn = sqlite3.connect(path)
    for script in MIGRATIONS[:8]:
        assert isinstance(script, str)
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 8")
    conn.execute(
        "INSERT INTO jobs (execution_id, task_id, caller, status, created_at, updated_at)"
        " VALUES ('old', 't.x', 'cli', 'running', 'x', 'x')"
    )
    conn.commit()
    conn.close()
    db = Database(f"sqlite:///{path}", installation=TEST_INSTALLATION)
    record = SqlJobStore(db).get("old")
    assert record is not None and record.installation == TEST_INSTALLATION
    assert record.host == socket.gethostname()
    assert [r.execution_id for r in SqlJobStore(db).list(active=True, mine=True)] == ["old"]
    db.close()


# Backends that wait for a lock: the statement under test blocked where it should.
_LOCK_WAITERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
)


def test_a_callers_writes_in_a_jobs_transaction_take_locks_in_the_order_run_writes_do(
    open_db: Callable[[], Database],
) -> None:
    """Found in review: an inline call's end wrote the job's event (the event log's lock) before its
    caller's run writes (the run's row), while every run write takes the run's row first. Here another
    transaction holds the run's row and then asks for the event log's lock, as a run write does; the
    job's end must wait for the row without holding the log's lock, or PostgreSQL kills one of the two
    as a deadlock. (On SQLite, one writer at a time: nothing to order.)"""
    from sqlalchemy import create_engine

    from tether.store.events import EVENTS_LOCK
    from tether.store.runs_sql import SqlRunStore

    db = open_db()
    if db.is_sqlite:
        pytest.skip("SQLite has one writer at a time")
    jobs, runs = SqlJobStore(db), SqlRunStore(db)
    runs.create("run-x", goal="", plan={"caller": "cli", "tasks": [{"id": "a", "call": {"task": "t.x"}}]},
                caller="cli")  # fmt: skip
    jobs.insert(result(TaskStatus.RUNNING), caller="cli", params={})
    ended: list[BaseException | None] = []

    def settle(conn: object, record: object) -> None:
        runs.settle_in(conn, "run-x", "a", 1, outcome="completed", message="", duration_s=0.0,
                       task={"status": "completed", "message": ""})  # fmt: skip

    def end() -> None:
        try:
            jobs.transition(result(TaskStatus.COMPLETED, "done"), also=settle)
            ended.append(None)
        except BaseException as exc:  # the deadlock's victim, if it is this one
            ended.append(exc)

    apart = create_engine(db.engine.url)  # a connection of its own, outside the store's pool
    with apart.connect() as other, other.begin():
        other.exec_driver_sql("SELECT rev FROM runs WHERE run_id = 'run-x' FOR UPDATE")
        waiter = threading.Thread(target=end)
        waiter.start()
        wait_for(lambda: ended or other.exec_driver_sql(_LOCK_WAITERS).scalar(),
                 what="the job's end to wait for the run's row")  # fmt: skip
        other.exec_driver_sql(f"SELECT pg_advisory_xact_lock({EVENTS_LOCK})")  # deadlocked, before
    apart.dispose()
    waiter.join(timeout=30)
    assert ended == [None], ended
    record = jobs.get("e1")
    assert record is not None and record.status is TaskStatus.COMPLETED
