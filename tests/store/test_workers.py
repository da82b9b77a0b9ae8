"""The registry of an installation's executors on several hosts (``store/workers.py``), on SQLite and
PostgreSQL: membership, heartbeats and resource holds on the database's clock, claims of the silent,
stops asked of a node and the log tails it publishes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import TEST_INSTALLATION
from tests.support.helpers import wait_for
from tether.store.database import Database
from tether.store.jobs import SqlJobStore
from tether.store.workers import ALIVE, LOST, STOPPED, WorkerStore, WorkerTaken
from tether.tasks.result import TaskResult, TaskStatus

LEASE = 0.6


@pytest.fixture
def nodes(database_url: str) -> Iterator[dict[str, WorkerStore]]:
    """Three nodes of one installation, and a node of another installation, on one database."""
    opened = [Database(database_url, installation=TEST_INSTALLATION, node=n) for n in ("a", "b", "c")]
    other = Database(database_url, installation="0123456789abcdef", node="a")
    yield {**{n: WorkerStore(db) for n, db in zip("abc", opened, strict=True)}, "other": WorkerStore(other)}
    for db in (*opened, other):
        db.close()


def _join(
    store: WorkerStore, eid: str, resources: tuple[str, ...] = (), *, home: str = "/h", version: str = "v1"
) -> None:
    store.join(eid, machine="m", home=home, pid=1, resources=resources, version=version, lease_s=LEASE)


def test_one_holder_per_resource_and_a_standby_takes_it_only_once_the_hold_expired(
    nodes: dict[str, WorkerStore],
) -> None:
    a, b = nodes["a"], nodes["b"]
    _join(a, "a/x/slot-0", ("arm",), home="/a")
    _join(b, "b/x/slot-0", ("arm",), home="/b")
    assert a.beat("a/x/slot-0", "v1", ("arm",), LEASE) == (True, ("arm",))
    assert b.beat("b/x/slot-0", "v1", ("arm",), LEASE) == (True, ())  # a holds it
    assert a.beat("a/x/slot-0", "v1", ("arm",), LEASE) == (True, ("arm",))  # renewed
    assert wait_for(
        lambda: b.beat("b/x/slot-0", "v1", ("arm",), LEASE)[1] == ("arm",), timeout=10
    )  # a went silent
    assert a.beat("a/x/slot-0", "v1", ("arm",), LEASE) == (True, ())  # and cannot take it back
    assert a.holders()["arm"][0] == "b/x/slot-0@v1"


def test_of_many_that_race_for_a_free_resource_exactly_one_holds_it(nodes: dict[str, WorkerStore]) -> None:
    stores = [nodes["a"], nodes["b"], nodes["c"]]
    for n, store in zip("abc", stores, strict=True):
        _join(store, f"{n}/x/slot-0", ("arm",), home=f"/{n}")
    won: list[str] = []
    go = threading.Barrier(3)

    def race(n: str, store: WorkerStore) -> None:
        go.wait()
        if store.beat(f"{n}/x/slot-0", "v1", ("arm",), 60)[1]:  # a minute: no hold expires mid-race
            won.append(n)

    threads = [threading.Thread(target=race, args=(n, s)) for n, s in zip("abc", stores, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1


def test_a_second_home_under_a_live_executor_id_is_refused_and_told_to_name_its_node(
    nodes: dict[str, WorkerStore],
) -> None:
    a = nodes["a"]
    _join(a, "a/x/slot-0", home="/one")
    with pytest.raises(WorkerTaken, match=r"node name of its own"):
        _join(a, "a/x/slot-0", home="/two")
    _join(a, "a/x/slot-0", home="/one")  # the same home again: its earlier holder is dead (slot lock)


def test_the_silent_are_claimed_once_by_one_executor_of_their_version_and_told_so_if_they_return(
    nodes: dict[str, WorkerStore],
) -> None:
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    _join(a, "a/x/slot-0", ("arm",))
    _join(b, "b/x/slot-0", version="v1")
    _join(c, "c/x/slot-0", version="v2")
    a.beat("a/x/slot-0", "v1", ("arm",), LEASE)
    assert b.claim_lost("b/x/slot-0", LEASE, "v1") == []  # not silent yet

    def claimed() -> list[str]:
        b.beat("b/x/slot-0", "v1", (), LEASE)
        c.beat("c/x/slot-0", "v1", (), LEASE)
        return b.claim_lost("b/x/slot-0", LEASE, "v1")

    assert wait_for(lambda: claimed() == ["a/x/slot-0"], timeout=10)
    assert c.claim_lost("c/x/slot-0", LEASE, "v1") == []  # claimed once
    assert c.claim_lost("c/x/slot-0", 0.0, "v2") == []  # b beats; another version claims nothing of v1
    found = {w.executor_id: w for w in a.workers()}
    assert found["a/x/slot-0"].status == LOST and found["a/x/slot-0"].taken_by == "b/x/slot-0"
    assert a.holders() == {} or a.holders()["arm"][1] < 0  # its hold went with it
    assert a.beat("a/x/slot-0", "v1", ("arm",), LEASE) == (False, ())  # back from a partition: it must stop
    assert a.node_lost("a") is not None and a.node_lost("b") is None


def test_leaving_releases_holds_at_once_and_another_installation_sees_nothing(
    nodes: dict[str, WorkerStore],
) -> None:
    a, b, other = nodes["a"], nodes["b"], nodes["other"]
    _join(a, "a/x/slot-0", ("arm",))
    _join(b, "b/x/slot-0", ("arm",), home="/b")
    a.beat("a/x/slot-0", "v1", ("arm",), 60)
    a.leave("a/x/slot-0", "v1")
    assert b.beat("b/x/slot-0", "v1", ("arm",), 60) == (True, ("arm",))  # no wait for a's minute-long hold
    statuses = {w.executor_id: w.status for w in b.workers()}
    assert statuses == {"a/x/slot-0": STOPPED, "b/x/slot-0": ALIVE}
    assert other.workers() == [] and other.holders() == {}
    _join(other, "a/y/slot-0", ("arm",))
    assert other.beat("a/y/slot-0", "v1", ("arm",), 60) == (True, ("arm",))  # its own arm
    assert b.forget("a") == 1 and [w.node for w in b.workers()] == ["b"]


def test_a_stop_asked_of_a_job_reaches_only_its_node_while_the_job_runs(
    nodes: dict[str, WorkerStore], database_url: str
) -> None:
    a, b = nodes["a"], nodes["b"]
    db_b = Database(database_url, installation=TEST_INSTALLATION, node="b")
    try:
        jobs = SqlJobStore(db_b)
        running = TaskResult(task_id="t.x", execution_id="e" * 19, status=TaskStatus.RUNNING, message="")
        jobs.insert(running, caller="cli", params={})
        a.request_stop("e" * 19, "asked by cli", "a")
        a.request_stop("e" * 19, "asked again", "a")  # the first reason stands
        assert b.stops_here() == [("e" * 19, "asked by cli")]
        assert a.stops_here() == []  # not a's job
        jobs.transition(running.model_copy(update={"status": TaskStatus.STOPPED}))
        assert b.stops_here() == []  # ended: nothing to apply
        b.publish_tail("e" * 19, "x" * 10_000 + "the end\n")
        tail, age = a.tail("e" * 19)
        assert tail is not None and tail.endswith("the end\n") and len(tail) <= 8000
        assert age is not None and age < 60
        assert a.tail("f" * 19) == (None, None)
    finally:
        db_b.close()


def test_the_database_clock_is_one_for_every_node(nodes: dict[str, WorkerStore]) -> None:
    before = time.time()
    now = nodes["a"].now()
    assert abs(now - nodes["b"].now()) < 5
    assert abs(now - before) < 60  # the same clock as this host's, give or take (one machine here)


def test_of_two_processes_joined_under_one_id_only_the_last_one_beats(nodes: dict[str, WorkerStore]) -> None:
    a = nodes["a"]
    first = a.join("a/x/slot-0", machine="m", home="/h", pid=1, resources=("arm",), version="v1", lease_s=60)
    second = a.join("a/x/slot-0", machine="m", home="/h", pid=2, resources=("arm",), version="v1", lease_s=60)
    assert second != first
    assert a.beat("a/x/slot-0", "v1", ("arm",), 60, first) == (False, ())  # it must stop at once
    assert a.beat("a/x/slot-0", "v1", ("arm",), 60, second) == (True, ("arm",))


def test_a_cloned_host_beating_under_this_id_is_refused_and_a_dead_predecessor_is_not(
    nodes: dict[str, WorkerStore],
) -> None:
    """A clone has the same machine name and home path: only its moving heartbeat tells it apart from
    this home's own dead predecessor, whose row has not been silent for a lease yet."""
    a = nodes["a"]
    twin = a.join("a/x/slot-0", machine="m", home="/h", pid=7, resources=(), version="v1", lease_s=60)
    beating = threading.Event()
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            a.beat("a/x/slot-0", "v1", (), 60, twin)
            beating.set()
            stop.wait(0.05)

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        assert beating.wait(10)
        with pytest.raises(WorkerTaken, match="a cloned machine"):
            a.join(
                "a/x/slot-0",
                machine="m",
                home="/h",
                pid=8,
                resources=(),
                version="v1",
                lease_s=60,
                watch_s=2,
            )
    finally:
        stop.set()
        thread.join()
    # The twin died (its beats stopped), its row still fresh: this home's executor takes the id over.
    mine = a.join(
        "a/x/slot-0", machine="m", home="/h", pid=8, resources=(), version="v1", lease_s=60, watch_s=0.3
    )
    assert a.beat("a/x/slot-0", "v1", (), 60, mine) == (True, ())


def test_a_forwarded_call_whose_caller_fell_silent_is_found_by_its_node_once(
    nodes: dict[str, WorkerStore],
) -> None:
    a, b = nodes["a"], nodes["b"]
    jobs = SqlJobStore(a.db)
    running = TaskResult(task_id="t.x", execution_id="fwd-1", status=TaskStatus.RUNNING)
    jobs.insert(running, caller="cli", params={})
    b.follow("fwd-1")  # the caller, on b, waits for a's job
    assert a.unfollowed(30) == []  # (a generous lease: a loaded machine may take long between lines)
    assert b.unfollowed(0.0) == []  # not b's job: b has nothing to stop
    found = wait_for(lambda: a.unfollowed(LEASE), timeout=10)  # b fell silent
    assert [eid for eid, _ in found] == ["fwd-1"] and found[0][1] >= LEASE
    b.follow("fwd-1")  # it speaks again in time: nothing to stop
    assert a.unfollowed(30) == []
    a.request_stop("fwd-1", "its caller stopped waiting", "a")  # asked once: not found again
    assert wait_for(lambda: a.unfollowed(0.0) == [], timeout=10)
