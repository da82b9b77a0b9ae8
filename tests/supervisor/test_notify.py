"""What the notify loop makes of a job's end (``supervisor/notify.py``): a background job's end is a
notification and an ``ended`` signal; any other job's end is neither, and costs no read of its job."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.support.statements import selects, statements
from tether.events import JobStateChanged
from tether.runtime import Runtime
from tether.supervisor.notify import describe, ended_signal
from tether.tasks.result import TaskResult, TaskStatus


@pytest.fixture
def runtime(home: Path) -> Iterator[Runtime]:
    with Runtime.open(home) as opened:
        yield opened


def _ended(runtime: Runtime, execution_id: str, *, background: bool) -> JobStateChanged:
    """A job inserted and ended through the store; the event its end wrote."""
    jobs = runtime.jobs
    start = TaskResult(task_id="demo.loop_farm", execution_id=execution_id, status=TaskStatus.RUNNING)
    jobs.insert(start, caller="cli", params={}, background=background)
    jobs.transition(start.model_copy(update={"status": TaskStatus.COMPLETED, "message": "farmed"}))
    changes = [e for e in runtime.events.read(kinds=["job_state_changed"]) if isinstance(e, JobStateChanged)]
    return next(e for e in changes if e.execution_id == execution_id and e.status == "completed")


def test_a_background_jobs_end_is_said_and_signalled(runtime: Runtime) -> None:
    ended = _ended(runtime, "bg-1", background=True)
    assert ended.background is True
    described = describe(runtime, ended, "")
    assert described is not None and described[0] == "ended" and "bg-1" in described[2]
    signal = ended_signal(runtime, ended)
    assert signal is not None and signal.data["execution_id"] == "bg-1"


def test_any_other_jobs_end_is_neither_and_reads_no_job(runtime: Runtime) -> None:
    """Study of a flow run's cost: the loop read every ended job twice (for the notification and
    for the signal), 6 statements and 2 transactions per flow task, to find it was not in the
    background."""
    ended = _ended(runtime, "fg-1", background=False)
    assert ended.background is False
    with statements(runtime.db.engine, lambda s: selects(s) and " jobs" in s) as seen:
        assert describe(runtime, ended, "") is None and ended_signal(runtime, ended) is None
    assert seen == []


def test_an_event_written_before_it_said_so_still_reads_its_job(runtime: Runtime) -> None:
    ended = _ended(runtime, "old-1", background=True).model_copy(update={"background": None})
    assert describe(runtime, ended, "") is not None and ended_signal(runtime, ended) is not None


def test_a_runs_end_is_weighed_from_the_runs_head_alone(runtime: Runtime) -> None:
    """Study of a flow run's cost: weighing a run's end read the whole run (its plan, every task and
    every attempt) in every executor, for its goal and duration. Its head says them."""
    from tether.events import RunChanged

    runtime.runs.create("r-1", goal="tidy the shelves", plan={"tasks": [{"id": "a"}]}, caller="cli")
    assert runtime.runs.set_status("r-1", "completed", "done")
    changes = [e for e in runtime.events.read(kinds=["run_changed"]) if isinstance(e, RunChanged)]
    (ended,) = [e for e in changes if e.status == "completed"]
    with statements(runtime.db.engine, lambda s: selects(s) and " run" in s) as seen:
        signal = ended_signal(runtime, ended)
    assert signal is not None and signal.data["task"] == "tidy the shelves"
    assert signal.data["duration_s"] >= 0
    assert len(seen) == 1 and not re.search(r"runs\.plan\b", seen[0]) and "run_tasks" not in seen[0], seen


def _ended_runs(runtime: Runtime, n: int, tag: str) -> None:
    for k in range(n):
        run_id = f"{tag}-{k}"
        runtime.runs.create(run_id, goal=f"shelf {k}", plan={"tasks": [{"id": "a"}]}, caller="cli")
        assert runtime.runs.set_status(run_id, "completed", "done")


@pytest.mark.parametrize("ended", [1, 6])
def test_a_pass_over_many_run_ends_reads_each_thing_once(runtime: Runtime, ended: int) -> None:
    """Study of a flow run's cost: every run's end cost the loop seven transactions of its own (the
    channels, the run's head, its key's decision, the agent, its threshold, the decision's insert and
    read-back, the cursor), and every executor paid them. A pass now reads the channels, the heads, the
    decisions and each agent once, whatever the number of ends; each end costs its decision's insert."""
    import asyncio

    from tether.config import InitiativeSettings
    from tether.supervisor.notify import step

    settings = InitiativeSettings.load(runtime.home)
    asyncio.run(step(runtime, settings))  # the cursor starts at the log's end
    before = runtime.events.last_id()
    _ended_runs(runtime, ended, "r")
    with statements(runtime.db.engine, selects) as seen:
        asyncio.run(step(runtime, settings))
    decided = runtime.initiative.decisions(limit=100)
    assert sorted(d.signal["data"]["run_id"] for d in decided) == [f"r-{k}" for k in range(ended)]
    shapes = [re.sub(r"\s+", " ", s)[:60] for s in seen]
    for table in ("FROM runs", "FROM channels", "FROM agents", "FROM thresholds", "signal_key IN"):
        assert sum(table in s for s in seen) == 1, (table, shapes)
    with statements(runtime.db.engine, selects) as again:  # nothing new: the log itself is not read again
        asyncio.run(step(runtime, settings))
    assert not any("FROM events WHERE" in s or "FROM runs" in s for s in again), again
    assert len(runtime.initiative.decisions(limit=100)) == ended
    # A crash after the decisions but before the cursor moved: the pass is read again, and adds nothing.
    with runtime.db.write() as conn:
        conn.execute(text("UPDATE cursors SET position = :p WHERE name = 'notify'"), {"p": before})
    asyncio.run(step(runtime, settings))
    assert runtime.initiative.decisions(limit=100) == decided


def test_a_row_this_version_cannot_read_never_makes_a_pass_skip_the_rest(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: a pass that read a full page judged it by the events it could read, so a page
    holding a row this tether cannot read (a newer tether's, or damage) looked like the log's end and
    the cursor jumped over every event after it, unweighed."""
    import asyncio

    from sqlalchemy import insert

    from tether.config import InitiativeSettings
    from tether.store import schema
    from tether.supervisor import notify

    monkeypatch.setattr(notify, "BATCH", 3)
    settings = InitiativeSettings.load(runtime.home)
    asyncio.run(notify.step(runtime, settings))
    _ended_runs(runtime, 1, "a")
    with runtime.db.write() as conn:  # a run's change this version cannot read
        conn.execute(
            insert(schema.events),
            {"ts": 0.0, "kind": "run_changed", "topic": "run:x", "payload": '{"status": 7}',
             "installation": runtime.installation.id},
        )  # fmt: skip
    _ended_runs(runtime, 3, "b")
    for _ in range(6):
        asyncio.run(notify.step(runtime, settings))
    weighed = sorted(d.signal["data"]["run_id"] for d in runtime.initiative.decisions(limit=100))
    assert weighed == ["a-0", "b-0", "b-1", "b-2"]
