"""Initiative's decisions and the run heads it weighs, on SQLite and on PostgreSQL: a keyed decision is
recorded once in one statement (a second record of its key, from any executor, answers the first), and
a pass reads the decisions of many keys, or the heads of many runs, in one read."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tether.store.database import Database
from tether.store.initiative import InitiativeStore
from tether.store.runs_sql import SqlRunStore


def _record(store: InitiativeStore, key: str | None, reason: str = "quiet") -> tuple[Any, bool]:
    return store.record(
        agent="assistant", signal_key=key, kind="ended", signal={"kind": "ended", "key": key}, fired=False,
        category="none", score=0.1, threshold=0.7, reason=reason, decided_by="rules",
    )  # fmt: skip


def test_a_keyed_decision_is_recorded_once(open_db: Callable[[], Database]) -> None:
    store = InitiativeStore(open_db())
    first, new = _record(store, "event:1")
    assert new and first.reason == "quiet" and first.signal == {"kind": "ended", "key": "event:1"}
    again, new_again = _record(store, "event:1", reason="loud")
    assert not new_again and again == first
    unkeyed = [_record(store, None) for _ in range(2)]  # no key: every record is a decision of its own
    assert all(new for _, new in unkeyed) and unkeyed[0][0].decision_id != unkeyed[1][0].decision_id
    assert store.by_keys(["event:1", "event:2"]) == {"event:1": first}
    assert store.by_keys([]) == {}


def test_executors_racing_on_one_key_record_one_decision(open_db: Callable[[], Database]) -> None:
    stores = [InitiativeStore(open_db()) for _ in range(4)]
    start, got = threading.Barrier(len(stores)), []

    def race(store: InitiativeStore) -> None:
        start.wait()
        got.append(_record(store, "event:7", reason=f"by {id(store)}"))

    threads = [threading.Thread(target=race, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(new for _, new in got) == 1
    assert len({record.decision_id for record, _ in got}) == 1
    assert len({record.reason for record, _ in got}) == 1


def test_the_heads_of_many_runs_are_read_together(open_db: Callable[[], Database]) -> None:
    store = SqlRunStore(open_db())
    for k in range(3):
        store.create(f"r{k}", goal=f"goal {k}", plan={"caller": "cli", "tasks": [{"id": "a"}]}, caller="cli")
    heads = store.heads(["r2", "r0", "r0", "ghost"])
    assert sorted(heads) == ["r0", "r2"]
    assert heads["r2"].goal == "goal 2" and heads["r2"].tasks == () and heads["r2"].plan == {}
    assert store.heads([]) == {}
