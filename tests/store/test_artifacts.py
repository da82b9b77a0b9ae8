"""Generated files on record, on SQLite and on PostgreSQL: recorded with the job's completion, exactly
once; the newest per origin and format offered; superseded and deleted threads' files removed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.store.artifact_files import file_of, forget_thread, sweep
from tether.store.artifacts import SqlArtifactStore
from tether.store.database import Database
from tether.store.events import EventLog
from tether.store.jobs import SqlJobStore
from tether.tasks.result import TaskResult, TaskStatus


@pytest.fixture
def db(open_db: Callable[[], Database]) -> Database:
    return open_db()


def generated(home: Path, eid: str, *names: str) -> list[dict[str, object]]:
    folder = home / "artifacts" / eid
    folder.mkdir(parents=True, exist_ok=True)
    items = []
    for name in names:
        (folder / name).write_bytes(b"x" * 10)
        items.append(
            {"format": name.rsplit(".", 1)[1], "path": f"artifacts/{eid}/{name}", "name": name, "size": 10}
        )
    return items


def finish(jobs: SqlJobStore, eid: str, items: list[dict[str, object]], origin: str | None) -> None:
    running = TaskResult(task_id="documents.generate", execution_id=eid, status=TaskStatus.RUNNING)
    jobs.insert(running, caller="agent", params={}, origin=origin, step_id=f"{eid}-step")
    done = running.model_copy(update={"status": TaskStatus.COMPLETED, "data": {"artifacts": items}})
    jobs.transition(done)
    jobs.transition(done)  # a second observer of the same end records nothing more


def test_files_go_on_record_once_with_their_thread_and_step(db: Database, tmp_path: Path) -> None:
    jobs, store = SqlJobStore(db), SqlArtifactStore(db)
    finish(jobs, "e1", generated(tmp_path, "e1", "讲义.pptx", "讲义.pdf"), "thread:th-1")
    listed = store.list(thread_id="th-1")
    assert sorted(a.format for a in listed) == ["pdf", "pptx"]
    assert {a.step_id for a in listed} == {"e1-step"} and {a.name for a in listed} == {
        "讲义.pptx",
        "讲义.pdf",
    }
    kinds = [e.kind for e in EventLog(db).read()]
    assert kinds.count("artifact_created") == 2
    assert kinds.index("artifact_created") < kinds.index("job_state_changed", kinds.index("artifact_created"))


def test_only_the_newest_file_per_thread_and_format_is_kept(db: Database, tmp_path: Path) -> None:
    jobs, store = SqlJobStore(db), SqlArtifactStore(db)
    finish(jobs, "e1", generated(tmp_path, "e1", "a.pptx", "a.pdf"), "thread:th-1")
    finish(jobs, "e2", generated(tmp_path, "e2", "b.pptx"), "thread:th-1")
    finish(jobs, "e3", generated(tmp_path, "e3", "c.pptx"), "thread:th-2")
    assert sorted(a.name for a in store.list(thread_id="th-1")) == ["a.pdf", "b.pptx"]
    assert sweep(tmp_path, store) == 1
    assert not (tmp_path / "artifacts/e1/a.pptx").exists() and (tmp_path / "artifacts/e1/a.pdf").exists()
    assert [a.name for a in store.list(thread_id="th-2")] == ["c.pptx"]
    assert forget_thread(tmp_path, store, "th-1") == 2
    assert not (tmp_path / "artifacts/e1").exists() and not (tmp_path / "artifacts/e2").exists()
    assert (tmp_path / "artifacts/e3/c.pptx").exists()


def test_a_result_cannot_put_other_files_on_record(db: Database, tmp_path: Path) -> None:
    jobs, store = SqlJobStore(db), SqlArtifactStore(db)
    bad = [
        {"format": "pdf", "path": "settings.toml", "size": 1},
        {"format": "pdf", "path": "artifacts/other/x.pdf", "size": 1},
        {"format": "pdf", "path": "artifacts/e1/../../x.pdf", "size": 1},
        {"format": "exe", "path": "artifacts/e1/x.exe", "size": 1},
        {"format": "pdf", "path": "artifacts/e1/x.pdf", "size": -1},
        "artifacts/e1/x.pdf",
    ]
    finish(jobs, "e1", bad, "thread:th-1")  # type: ignore[arg-type]
    assert store.list() == []


def test_a_file_replaced_by_a_link_is_not_served(db: Database, tmp_path: Path) -> None:
    jobs, store = SqlJobStore(db), SqlArtifactStore(db)
    finish(jobs, "e1", generated(tmp_path, "e1", "a.pdf"), "thread:th-1")
    (artifact,) = store.list()
    assert file_of(tmp_path, artifact) == tmp_path / "artifacts/e1/a.pdf"
    secret = tmp_path / "secret.txt"
    secret.write_text("no")
    (tmp_path / "artifacts/e1/a.pdf").unlink()
    os.symlink(secret, tmp_path / "artifacts/e1/a.pdf")
    assert file_of(tmp_path, artifact) is None


def test_a_run_keeps_every_file_it_made_and_a_name_is_only_ever_a_file_name(
    db: Database, tmp_path: Path
) -> None:
    jobs, store = SqlJobStore(db), SqlArtifactStore(db)
    finish(jobs, "e1", generated(tmp_path, "e1", "cats.pdf"), "run:run-1")
    finish(jobs, "e2", generated(tmp_path, "e2", "dogs.pdf"), "run:run-1")
    assert sorted(a.name for a in store.list(origin="run:run-1")) == ["cats.pdf", "dogs.pdf"]
    # A goal run's agent task talks in its own thread (run-<execution id>): still the run's files.
    finish(jobs, "e4", generated(tmp_path, "e4", "a.pdf"), "thread:run-1a2b")
    finish(jobs, "e5", generated(tmp_path, "e5", "b.pdf"), "thread:run-1a2b")
    assert sorted(a.name for a in store.list(thread_id="run-1a2b")) == ["a.pdf", "b.pdf"]
    assert sweep(tmp_path, store) == 0 and (tmp_path / "artifacts/e1/cats.pdf").exists()
    items = generated(tmp_path, "e3", "x.md")
    items[0]["name"] = "../../../../tmp/escaped.txt"
    finish(jobs, "e3", items, "thread:th-9")
    assert [a.name for a in store.list(thread_id="th-9")] == ["x.md"]


def test_the_folder_of_a_generate_that_ended_without_completing_is_swept(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.store.artifact_files.FOLDER_SWEEP_S", 0.0)  # every listing looks, here
    jobs, store = SqlJobStore(db), SqlArtifactStore(db)
    generated(tmp_path, "stopped1", "half.pdf")
    running = TaskResult(task_id="documents.generate", execution_id="stopped1", status=TaskStatus.RUNNING)
    jobs.insert(running, caller="agent", params={}, origin="thread:th-1")
    generated(tmp_path, "live1", "going.pdf")
    jobs.insert(running.model_copy(update={"execution_id": "live1"}), caller="agent", params={})
    finish(jobs, "done1", generated(tmp_path, "done1", "kept.pdf"), "thread:th-2")
    sweep(tmp_path, store, jobs)
    assert (tmp_path / "artifacts/stopped1").exists()  # still running: its files are being written
    jobs.transition(running.model_copy(update={"status": TaskStatus.STOPPED}))
    sweep(tmp_path, store, jobs)
    assert not (tmp_path / "artifacts/stopped1").exists()
    assert (tmp_path / "artifacts/live1/going.pdf").exists() and (
        tmp_path / "artifacts/done1/kept.pdf"
    ).exists()


def test_deleting_a_thread_removes_the_folders_of_the_jobs_it_stopped_mid_write(
    db: Database, tmp_path: Path
) -> None:
    from tether.store.artifact_files import remove_unfinished

    jobs, store = SqlJobStore(db), SqlArtifactStore(db)
    generated(tmp_path, "half", "x.pdf")
    finish(jobs, "whole", generated(tmp_path, "whole", "y.pdf"), "thread:th-1")
    assert remove_unfinished(tmp_path, store, ["half", "whole", "../x", ""]) == 1
    assert not (tmp_path / "artifacts/half").exists() and (tmp_path / "artifacts/whole/y.pdf").exists()


def test_each_installation_sweeps_and_forgets_only_its_own_files(
    db: Database, database_url: str, tmp_path: Path
) -> None:
    """Two homes on one database, writing to one thread: each file is in the home whose job made it, so
    each home removes only its own files and drops only their records, never the record of a file it
    cannot reach."""
    other_db = Database(database_url, installation="0123456789abcdef")
    try:
        here, there = tmp_path / "here", tmp_path / "there"
        jobs, store = SqlJobStore(db), SqlArtifactStore(db)
        other_jobs, other_store = SqlJobStore(other_db), SqlArtifactStore(other_db)
        finish(other_jobs, "e1", generated(there, "e1", "a.pdf"), "thread:th-1")
        finish(jobs, "e2", generated(here, "e2", "b.pdf"), "thread:th-1")  # supersedes theirs
        (theirs,) = store.list(execution_id="e1", include_superseded=True)
        assert theirs.installation == "0123456789abcdef" and theirs.superseded_at is not None
        assert sweep(here, store) == 0  # not this home's file: its record stays for its owner
        assert other_store.get(theirs.artifact_id) is not None
        assert (there / "artifacts/e1/a.pdf").exists()
        assert forget_thread(here, store, "th-1") == 1
        assert [a.execution_id for a in other_store.list(thread_id="th-1", include_superseded=True)] == ["e1"]
        assert sweep(there, other_store) == 1
        assert not (there / "artifacts/e1/a.pdf").exists()
    finally:
        other_db.close()
