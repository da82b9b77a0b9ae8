"""Threads, on SQLite and on PostgreSQL: one writer per thread, replays that add nothing, bounded reads."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from tether.events import TurnStarted
from tether.store.database import Database
from tether.store.events import EventLog
from tether.store.threads import StepRecord
from tether.store.threads_sql import SqlThreadStore

ME = (os.getpid(), 0.0)


def always(pid: int, create_time: float) -> bool:
    return True


def never(pid: int, create_time: float) -> bool:
    return False


def test_a_thread_has_one_turn_at_a_time_and_a_dead_owner_frees_it(open_db: Callable[[], Database]) -> None:
    threads = SqlThreadStore(open_db())
    assert threads.begin_turn("th", "hello", ME, always) == 1
    assert threads.begin_turn("th", "again", ME, always) is None  # the first one is still running
    assert threads.begin_turn("th", "again", ME, never) == 2  # its owner is gone: it is interrupted
    first = threads.turn("th", 1)
    assert first is not None and first.status == "interrupted"
    assert [t.turn for t in threads.turns_with_status("th", "interrupted")] == [1]
    threads.end_turn("th", 2, "completed", "done")
    assert threads.begin_turn("th", "third", ME, always) == 3


def test_turn_numbers_are_allocated_once_under_real_concurrency(open_db: Callable[[], Database]) -> None:
    """Audit 7: two concurrent sends on one thread overwrote each other's step records."""
    stores = [SqlThreadStore(open_db()) for _ in range(8)]
    got: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(stores))

    def claim(store: SqlThreadStore) -> None:
        try:
            take(store)
        except BaseException as exc:
            errors.append(exc)

    def take(store: SqlThreadStore) -> None:
        barrier.wait()
        while True:
            number = store.begin_turn("busy", "go", ME, always)
            if number is not None:
                store.record_step(
                    StepRecord(thread_id="busy", turn=number, index=0, kind="model", text=str(number))
                )
                got.append(number)
                store.end_turn("busy", number, "completed", "")
                return

    workers = [threading.Thread(target=claim, args=(store,)) for store in stores]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    assert sorted(got) == list(range(1, 9))
    steps = stores[0].steps("busy")
    assert sorted(int(s.text) for s in steps) == list(range(1, 9))  # none overwritten


def test_a_replayed_message_or_step_is_stored_once(open_db: Callable[[], Database]) -> None:
    threads = SqlThreadStore(open_db())
    threads.begin_turn("th", "hi", ME, always)
    for _ in range(3):
        threads.append("th", 1, 0, {"role": "user", "content": "hi"})
        threads.record_step(
            StepRecord(thread_id="th", turn=1, index=0, kind="model", text="x"),
            message={"role": "assistant", "content": "x"},
        )
    assert threads.messages("th") == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "x"},
    ]
    assert len(threads.steps("th")) == 1


def test_a_step_recorded_started_is_finished_in_place(open_db: Callable[[], Database]) -> None:
    threads = SqlThreadStore(open_db())
    threads.begin_turn("th", "go", ME, always)
    started = StepRecord(thread_id="th", turn=1, index=0, kind="tool", status="started", execution_id="e1")
    threads.record_step(started)
    done = {"status": "completed"}
    threads.record_step(
        StepRecord(thread_id="th", turn=1, index=0, kind="tool", result=done, execution_id="e1")
    )
    [step] = threads.steps("th", turn=1)
    assert step.status == "finished" and step.execution_id == "e1" and step.result == {"status": "completed"}


def test_reads_skip_the_folded_prefix(open_db: Callable[[], Database]) -> None:
    threads = SqlThreadStore(open_db())
    threads.begin_turn("th", "go", ME, always)
    for index in range(10):
        threads.append("th", 1, index, {"n": index})
    assert [m["n"] for m in threads.messages("th", from_seq=7)] == [7, 8, 9]


def test_steps_and_their_events_are_written_together(open_db: Callable[[], Database]) -> None:
    db = open_db()
    threads = SqlThreadStore(db)
    threads.begin_turn("th", "go", ME, always)
    event_id = threads.record_step(
        StepRecord(thread_id="th", turn=1, index=0, kind="model"),
        TurnStarted(topic="thread:th", thread_id="th", turn=1, message="go"),
    )
    [event] = EventLog(db).read(topics=["thread:th"])
    assert event.id == event_id and isinstance(event, TurnStarted)


def test_threads_page_by_last_change_each_once(open_db: Callable[[], Database]) -> None:
    from tether.store.threads import ThreadState

    threads = SqlThreadStore(open_db())
    for n in range(7):
        threads.save(ThreadState(thread_id=f"p{n}", title=f"t{n}"))
    seen: list[str] = []
    cursor = None
    while True:
        page = threads.threads(limit=3, before=cursor)
        seen += [t.thread_id for t in page]
        if len(page) < 3:
            break
        cursor = (page[-1].updated_at, page[-1].thread_id)
    assert seen == [f"p{n}" for n in reversed(range(7))]


def test_a_thread_made_before_its_first_message_is_named_by_it_and_can_be_renamed(
    open_db: Callable[[], Database],
) -> None:
    from tether.store.threads import ThreadState

    threads = SqlThreadStore(open_db())
    threads.save(ThreadState(thread_id="blank"))
    threads.begin_turn("blank", "启动游戏  然后\n刷金币", ME, always)
    state = threads.load("blank")
    assert state is not None and state.title == "启动游戏 然后 刷金币"
    assert threads.rename("blank", "mine") and not threads.rename("nope", "x")
    threads.end_turn("blank", 1, "completed", "ok")
    threads.begin_turn("blank", "later", ME, always)
    state = threads.load("blank")
    assert state is not None and state.title == "mine"  # a name is never overwritten
    assert [t.turn for t in threads.turns("blank")] == [1, 2]
    assert [t.turn for t in threads.turns("blank", limit=1)] == [2]


def test_orphaned_turns_are_interrupted_except_those_a_workflow_will_resume(
    open_db: Callable[[], Database],
) -> None:
    threads = SqlThreadStore(open_db())
    for thread in ("dead", "spared", "alive", "other"):
        threads.begin_turn(thread, "hi", (os.getpid() if thread == "alive" else 999_999, 0.0), always)
    alive = lambda pid, _: pid == os.getpid()  # noqa: E731
    assert threads.interrupt_orphans(alive, spare={"spared"}, only="dead") == [("dead", 1)]
    assert threads.interrupt_orphans(alive, spare={"spared"}) == [("other", 1)]
    assert [t.status for t in threads.turns("spared")] == ["running"]
    assert [t.status for t in threads.turns("alive")] == ["running"]
    assert threads.interrupt_orphans(alive) == [("spared", 1)]


def test_another_home_never_ends_takes_over_or_holds_a_turn_it_cannot_see(
    open_db: Callable[[], Database], database_url: str
) -> None:
    """Two homes on one database, one thread: the other home's process is out of sight here (another
    host), so seeming dead says nothing about it."""
    ours = SqlThreadStore(open_db())
    other_db = Database(database_url, installation="0123456789abcdef")
    try:
        theirs = SqlThreadStore(other_db)
        assert theirs.begin_turn("th", "from there", ME, always) == 1
        record = ours.turn("th", 1)
        assert record is not None and record.installation == "0123456789abcdef"
        assert ours.interrupt_orphans(never) == []
        assert ours.begin_turn("th", "from here", ME, never) is None  # the thread is busy, not free
        assert not ours.hold_turn("th", 1, ME)
        still = theirs.turn("th", 1)
        assert still is not None and still.status == "running"
        assert theirs.interrupt_orphans(never) == [("th", 1)]  # its own home settles it
        assert ours.begin_turn("th", "from here", ME, never) == 2
    finally:
        other_db.close()
