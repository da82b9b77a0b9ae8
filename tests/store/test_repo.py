import sqlite3
import threading
from pathlib import Path

import pytest

from tether.errors import StoreError
from tether.store.repo import JobRepo
from tether.store.schema import MIGRATIONS, connect
from tether.tasks.result import TaskResult, TaskStatus


def result(status: TaskStatus, message: str = "", eid: str = "e1") -> TaskResult:
    return TaskResult(task_id="t.x", execution_id=eid, status=status, message=message)


def test_store_is_wal_with_foreign_keys_and_migrated(tmp_path: Path) -> None:
    conn = connect(tmp_path / "t.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    conn.close()
    connect(tmp_path / "t.db").close()  # re-opening migrates nothing and fails nothing


def test_a_newer_schema_is_refused_with_advice(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    conn.close()
    with pytest.raises(StoreError, match="upgrade tether"):
        connect(tmp_path / "t.db")


def test_transitions_follow_the_state_machine(tmp_path: Path) -> None:
    repo = JobRepo(tmp_path / "t.db")
    repo.insert(result(TaskStatus.PENDING), caller="cli", params={"a": 1}, resources=("automation",))
    assert repo.transition(result(TaskStatus.RUNNING)).status is TaskStatus.RUNNING
    assert repo.transition(result(TaskStatus.COMPLETED, "done")).status is TaskStatus.COMPLETED
    after = repo.transition(result(TaskStatus.STOPPED, "late"))
    assert after.status is TaskStatus.COMPLETED and after.message == "done" and after.ended_at


def test_concurrent_writers_from_two_connections_never_overwrite_a_terminal_state(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    JobRepo(path).insert(result(TaskStatus.PENDING), caller="cli", params={})
    JobRepo(path).transition(result(TaskStatus.RUNNING))
    finals = [TaskStatus.COMPLETED, TaskStatus.STOPPED, TaskStatus.FAILED] * 4
    repos = [JobRepo(path) for _ in finals]
    barrier = threading.Barrier(len(finals))

    def write(repo: JobRepo, status: TaskStatus) -> None:
        barrier.wait()
        repo.transition(result(status, status.value))

    threads = [threading.Thread(target=write, args=pair) for pair in zip(repos, finals, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    record = JobRepo(path).get("e1")
    assert record is not None and record.status.terminal and record.message == record.status.value


def test_list_active_and_newest_first(tmp_path: Path) -> None:
    repo = JobRepo(tmp_path / "t.db")
    for i, status in enumerate([TaskStatus.COMPLETED, TaskStatus.RUNNING, TaskStatus.PENDING]):
        repo.insert(result(status, eid=f"e{i}"), caller="cli", params={})
    assert [r.execution_id for r in repo.list()] == ["e2", "e1", "e0"]
    assert [r.execution_id for r in repo.list(active=True)] == ["e2", "e1"]


def test_a_result_published_after_an_unobserved_running_is_adopted(tmp_path: Path) -> None:
    repo = JobRepo(tmp_path / "t.db")
    repo.insert(result(TaskStatus.PENDING), caller="cli", params={})
    assert repo.transition(result(TaskStatus.COMPLETED, "quick")).status is TaskStatus.COMPLETED
