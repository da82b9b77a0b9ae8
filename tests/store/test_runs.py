"""The run store's revisions, on SQLite and on PostgreSQL: a reader that keeps what it saw and asks for
what changed since misses no change, whichever writer made it, and under concurrent writers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.helpers import wait_for
from tether.store.database import Database
from tether.store.runs import TaskState
from tether.store.runs_sql import SqlRunStore


def _plan(n: int) -> dict[str, Any]:
    return {"caller": "cli", "tasks": [{"id": f"t{i}", "call": {"task": "x.y"}} for i in range(n)]}


class _Reader:
    """What the engine does: keep the tasks seen, read only those changed since the last revision."""

    def __init__(self, store: SqlRunStore, run_id: str) -> None:
        self.store, self.run_id, self.rev = store, run_id, -1
        self.tasks: dict[str, TaskState] = {}

    def read(self) -> dict[str, TaskState]:
        got = self.store.changes(self.run_id, self.rev)
        assert got is not None
        head, changed = got
        self.tasks.update({t.task_id: t for t in changed})
        self.rev = head.rev
        return self.tasks

    def fresh(self) -> dict[str, TaskState]:
        full = self.store.get(self.run_id)
        assert full is not None
        return {t.task_id: t for t in full.tasks}


def test_every_writer_moves_the_revision(open_db: Callable[[], Database]) -> None:
    store = SqlRunStore(open_db())
    store.create("r1", goal="g", plan=_plan(3), caller="cli")
    reader = _Reader(store, "r1")
    assert reader.read() == reader.fresh()
    unchanged = store.changes("r1", reader.rev)
    assert unchanged is not None and unchanged[1] == []

    writes: list[Callable[[], object]] = [
        lambda: store.update_task("r1", "t0", status="skipped", message="no"),
        lambda: store.begin_attempt("r1", "t1", 1, "e-1", {"call": "x.y"}),
        lambda: store.settle(
            "r1",
            "t1",
            1,
            outcome="completed",
            message="ok",
            duration_s=0.1,
            task={"status": "completed", "outputs": {"data.x": 1}},
        ),
        lambda: store.update_task(
            "r1", "t2", status="waiting_for_human", review={"kind": "before", "answer": None}
        ),
        lambda: store.answer("r1", "t2", {"answer": "approve", "by": "cli"}, status="pending"),
        lambda: store.add_tasks("r1", _plan(4), ["t3"]),
        lambda: store.set_status("r1", "failed", "stop"),
        lambda: store.reopen("r1"),
    ]
    for write in writes:
        write()
        assert reader.read() == reader.fresh()
    assert set(reader.tasks) == {"t0", "t1", "t2", "t3"}


def test_concurrent_writers_never_hide_a_change(open_db: Callable[[], Database]) -> None:
    stores = [SqlRunStore(open_db()) for _ in range(4)]
    stores[0].create("r2", goal="g", plan=_plan(40), caller="cli")
    reader = _Reader(stores[0], "r2")
    done = threading.Event()

    def write(k: int) -> None:
        for i in range(k, 40, 4):
            stores[k].update_task("r2", f"t{i}", status="completed", message=f"by {k}")

    def follow() -> None:
        while not done.is_set():
            reader.read()

    follower = threading.Thread(target=follow)
    follower.start()
    writers = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    done.set()
    follower.join()
    assert reader.read() == reader.fresh()
    assert all(t.status == "completed" for t in reader.tasks.values())


def test_task_counts_say_how_many_tasks_each_run_has_and_how_many_ended(
    open_db: Callable[[], Database],
) -> None:
    runs = SqlRunStore(open_db())
    plan = {"goal": "g", "tasks": [{"id": "a", "call": {"task": "x"}}, {"id": "b", "call": {"task": "x"}}]}
    runs.create("r1", goal="g", plan=plan, caller="agent")
    runs.create("r2", goal="g", plan={"goal": "g", "tasks": []}, caller="agent")
    runs.update_task("r1", "a", status="completed")
    assert runs.task_counts(["r1", "r2", "r3"]) == {"r1": (2, 1)}
    assert runs.task_counts([]) == {}


def test_each_home_drives_and_prunes_only_its_own_runs(
    open_db: Callable[[], Database], database_url: str
) -> None:
    ours = SqlRunStore(open_db())
    other_db = Database(database_url, installation="0123456789abcdef")
    try:
        theirs = SqlRunStore(other_db)
        mine = ours.create("run-mine", goal="", plan=_plan(1), caller="cli")
        theirs.create("run-theirs", goal="", plan=_plan(1), caller="cli")
        theirs.begin_attempt("run-theirs", "t0", 1, "e-theirs", {})
        assert mine.installation == ours.installation.id
        assert [r.run_id for r in ours.active()] == ["run-mine"]
        assert {r.run_id for r in ours.list()} == {"run-mine", "run-theirs"}  # listed, read-only
        seen = ours.get("run-theirs")
        assert seen is not None and seen.installation == "0123456789abcdef" and seen.host
        assert seen.attempts[0].installation == "0123456789abcdef"
        for store, run_id in ((ours, "run-mine"), (theirs, "run-theirs")):
            store.set_status(run_id, "completed")
        assert ours.delete_ended("9999") == [("run-mine", 0)]
        assert ours.get("run-theirs") is not None
        assert theirs.delete_ended("9999") == [("run-theirs", 0)]
    finally:
        other_db.close()


def test_a_waiter_whose_task_moved_on_never_holds_the_queue(open_db: Callable[[], Database]) -> None:
    """A task's move and its leaving the resource queue were two writes: an executor killed between them
    left the task first in the queue after it had run, and every later task that wanted the resource
    waited behind it forever (8 runs stranded at their second move of the arm in a kill storm)."""
    store = SqlRunStore(open_db())
    for run in ("r1", "r2"):
        store.create(run, goal="g", plan=_plan(2), caller="cli")
    store.wait_for(["arm"], "r1", "t0", since=1.0)
    store.wait_for(["arm"], "r2", "t0", since=2.0)
    assert store.first_waiters(["arm"]) == {"arm": ("r1", "t0")}
    # Its attempt in flight, it keeps its place: it may find the arm still busy, and asked first.
    store.update_task("r1", "t0", status="running")
    assert store.first_waiters(["arm"]) == {"arm": ("r1", "t0")}
    # Settled (and the executor dies before it leaves the queue): it holds the queue no more.
    store.update_task("r1", "t0", status="completed")
    assert store.first_waiters(["arm"]) == {"arm": ("r2", "t0")}
    store.wait_for(["arm"], "r1", "t1", since=3.0)
    assert store.first_waiters(["arm"]) == {"arm": ("r2", "t0")}


def test_an_attempt_leaves_the_resource_queue_in_its_settle(open_db: Callable[[], Database]) -> None:
    """The outcome and the leaving are one transaction, so a settled task is never left in the queue
    (which is what lets a task whose attempt is in flight keep its place)."""
    store = SqlRunStore(open_db())
    for run in ("r1", "r2"):
        store.create(run, goal="g", plan=_plan(1), caller="cli")
    store.wait_for(["arm"], "r1", "t0", since=1.0)
    store.wait_for(["arm"], "r2", "t0", since=2.0)
    store.begin_attempts("r1", [("t0", 1, "e-r1", {})])
    assert store.first_waiters(["arm"]) == {"arm": ("r1", "t0")}
    store.settle("r1", "t0", 1, outcome="completed", message="", duration_s=0.1,
                 task={"status": "completed", "message": ""})  # fmt: skip
    assert store.first_waiters(["arm"]) == {"arm": ("r2", "t0")}
    store.update_task("r1", "t0", status="pending")  # were it pending again, it has no place left
    assert store.first_waiters(["arm"]) == {"arm": ("r2", "t0")}
    # An attempt that found the arm busy again stays in the queue, with the place it first asked for.
    store.begin_attempts("r2", [("t0", 1, "e-r2", {})])
    store.settle("r2", "t0", 1, outcome="busy", message="", duration_s=0.1,
                 task={"status": "pending", "message": ""}, waiting=(["arm"], 9.0))  # fmt: skip
    store.wait_for(["arm"], "r1", "t0", since=5.0)
    assert store.first_waiters(["arm"]) == {"arm": ("r2", "t0")}


def test_a_scheduled_move_and_its_place_in_the_queue_are_one_write(
    open_db: Callable[[], Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schedule's move (a task left waiting behind a busy resource) and its joining the queue were two
    transactions: a crash between them left the task waiting outside the queue. Now the queue write
    failing takes the move back with it."""
    store = SqlRunStore(open_db())
    store.create("r1", goal="g", plan=_plan(1), caller="cli")
    waiting = (["arm"], 1.0)

    def crash(*args: object) -> None:
        raise RuntimeError("the process died here")

    monkeypatch.setattr(store, "_wait_for", crash)
    with pytest.raises(RuntimeError):
        store.move_task("r1", "t0", waiting=waiting, status="pending", message="waits for arm")
    run = store.get("r1")
    assert run is not None and run.task("t0").message == ""  # type: ignore[union-attr]
    monkeypatch.undo()
    store.move_task("r1", "t0", waiting=waiting, status="pending", message="waits for arm")
    assert store.first_waiters(["arm"]) == {"arm": ("r1", "t0")}
    store.move_task("r1", "t0", waiting=None, status="running", message="")
    store.update_task("r1", "t0", status="pending")
    assert store.first_waiters(["arm"]) == {}  # a move to anything but waiting left the queue


def test_a_run_id_is_taken_once_and_the_first_run_is_left_as_it_was(open_db: Callable[[], Database]) -> None:
    from tether.errors import StoreError

    store = SqlRunStore(open_db())
    store.create("r-once", goal="first", plan=_plan(2), caller="cli")
    with pytest.raises(StoreError, match="exists already"):
        store.create("r-once", goal="second", plan=_plan(5), caller="cli")
    run = store.get("r-once")
    assert run is not None and run.goal == "first" and [t.task_id for t in run.tasks] == ["t0", "t1"]


def test_a_runs_tasks_go_on_record_in_one_statement(open_db: Callable[[], Database]) -> None:
    """Study of a run's cost: a run's tasks were inserted with the driver's ``executemany``, which
    psycopg sends as one statement per task (ten for a chain of ten)."""
    from sqlalchemy import event

    db = open_db()
    store = SqlRunStore(db)
    sent: list[tuple[str, bool]] = []  # the statements as the driver is given them

    def seen(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        if "INSERT INTO run_tasks" in statement:
            sent.append((statement, many))

    event.listen(db.engine, "before_cursor_execute", seen)
    try:
        store.create("r10", goal="g", plan=_plan(10), caller="cli")
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)
    # One statement of ten rows (SQLAlchemy's "insertmanyvalues"), not one row sent ten times.
    assert len(sent) == 1 and sent[0][0].count("), (") == 9, sent
    run = store.get("r10")
    assert run is not None and [t.task_id for t in run.tasks] == [f"t{i}" for i in range(10)]


def _pending(eid: str) -> Any:
    from tether.tasks.result import TaskResult, TaskStatus

    return TaskResult(task_id="x.y", execution_id=eid, status=TaskStatus.PENDING, message="starting")


def test_a_call_of_a_run_that_has_ended_never_goes_on_record(open_db: Callable[[], Database]) -> None:
    """Found in review: an attempt that read its run before a cancel put its call on record after the
    cancel had looked for the run's jobs to stop, and the call ran to its end."""
    from tether.errors import StoreError
    from tether.store.jobs import SqlJobStore

    db = open_db()
    runs, jobs = SqlRunStore(db), SqlJobStore(db)
    runs.create("r1", goal="", plan=_plan(1), caller="cli")
    assert jobs.insert(_pending("e1"), caller="cli", params={}, origin="run:r1")
    runs.set_status("r1", "cancelled", "cancelled by cli")
    with pytest.raises(StoreError, match="run r1 is cancelled: none of its calls starts any more"):
        jobs.insert(_pending("e2"), caller="cli", params={}, origin="run:r1")
    assert jobs.get("e2") is None
    # What a cancelled run's call leaves on record is a refusal, and that goes in; so does a call whose
    # origin is no run on record (a caller's own label).
    from tether.tasks.result import TaskStatus

    refused = _pending("e3").model_copy(update={"status": TaskStatus.REJECTED, "message": "no"})
    assert jobs.insert(refused, caller="cli", params={}, origin="run:r1")
    assert jobs.insert(_pending("e4"), caller="cli", params={}, origin="run:elsewhere")
    # No attempt of it begins: its task stays cancelled, and keeps its attempt count (found in review: an
    # attempt on record with its task's count not moved made a resumed run decide the same attempt again,
    # for ever).
    runs.update_task("r1", "t0", status="cancelled", message="the run was cancelled")
    runs.begin_attempts("r1", [("t0", 1, "e5", {"call": "x.y"})])
    run = runs.view("r1", task_ids=["t0"], attempts_of="t0")
    assert run is not None and run.attempts == ()
    assert (run.tasks[0].status, run.tasks[0].attempts) == ("cancelled", 0)
    assert runs.reopen("r1")  # what a resume does first
    runs.begin_attempts("r1", [("t0", 1, "e5", {"call": "x.y"})])
    run = runs.view("r1", task_ids=["t0"], attempts_of="t0")
    assert run is not None and (run.tasks[0].status, run.tasks[0].attempts) == ("running", 1)
    assert [a.execution_id for a in run.attempts] == ["e5"]


def _lock_waits(db: Database) -> int:
    from sqlalchemy import text

    with db.read() as conn:
        found = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
        )
        return int(found.scalar_one())


def test_a_cancel_waits_for_a_call_that_found_its_run_open(open_db: Callable[[], Database]) -> None:
    """The run's row is held from the check to the call's commit: a cancel that comes in between waits,
    then finds the call on record (and stops it), on both databases."""
    from tether.store.jobs import SqlJobStore

    db = open_db()
    runs, jobs = SqlRunStore(db), SqlJobStore(db)
    runs.create("r1", goal="", plan=_plan(1), caller="cli")
    checked, release = threading.Event(), threading.Event()

    def held(conn: Any) -> None:  # the call's transaction, after its check and its insert
        checked.set()
        assert release.wait(30)

    inserting = threading.Thread(
        target=jobs.insert, args=(_pending("e1"),), kwargs={"caller": "cli", "params": {}, "origin": "run:r1",
                                                             "also": held}
    )  # fmt: skip
    inserting.start()
    assert checked.wait(30)
    cancelled: list[list[str]] = []

    def cancel() -> None:  # what ``service.cancel_run`` does: the status, then the jobs to stop
        runs.set_status("r1", "cancelled", "cancelled by cli")
        cancelled.append([j.execution_id for j in jobs.list(active=True, origin="run:r1")])

    cancelling = threading.Thread(target=cancel)
    cancelling.start()
    if not db.is_sqlite:  # seen waiting for the run's row (SQLite: for the file's one writer, unseen)
        wait_for(lambda: _lock_waits(db), timeout=30, what="the cancel to wait for the call's transaction")
    else:
        cancelling.join(1.0)
    assert not cancelled  # it cannot end while the call holds the run
    release.set()
    inserting.join(30)
    cancelling.join(30)
    assert cancelled == [["e1"]]


def test_two_claims_of_one_wave_both_go_on_record(open_db: Callable[[], Database]) -> None:
    """Two inline calls of one wave are claimed at once, each in a transaction that checks the run and
    then moves it (its attempt, ``begin_in``). Found writing the check: taken shared, both claims held the
    run's row and each waited for the other to let go (PostgreSQL ended one as a deadlock)."""
    from tether.store.jobs import SqlJobStore

    db = open_db()
    runs, jobs = SqlRunStore(db), SqlJobStore(db)
    runs.create("r1", goal="", plan=_plan(2), caller="cli")
    both = threading.Barrier(2)
    failed: list[BaseException] = []

    def claim(task_id: str) -> None:
        def started(conn: Any) -> None:
            try:  # both past their checks before either moves the run, when the check lets them be
                both.wait(timeout=1.0)
            except threading.BrokenBarrierError:
                pass
            runs.begin_in(conn, "r1", [(task_id, 1, f"e-{task_id}", {"call": "x.y"})])

        try:
            jobs.insert(_pending(f"e-{task_id}"), caller="cli", params={}, origin="run:r1", also=started)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=claim, args=(t,)) for t in ("t0", "t1")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failed, failed
    run = runs.get("r1")
    assert run is not None and {t.task_id: t.status for t in run.tasks} == {"t0": "running", "t1": "running"}
