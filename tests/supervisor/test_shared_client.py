"""One DBOS client per process and home, kept with its connections until the runtime closes.

Before it, every run started, segment looked at and call forwarded opened a DBOS client of its own and
with it a new database connection — on PostgreSQL a new server process each time: the several-hosts
bench measured enqueuing a run at 13 times a plain enqueue through a kept client."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import pg_home
from tether.runtime import Runtime
from tether.supervisor import durable


def _sessions(runtime: Runtime) -> int:
    """How many sessions the server has opened on the runtime's database so far."""
    from sqlalchemy import text

    with runtime.db.read() as conn:
        return int(
            conn.execute(
                text("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
            ).scalar_one()
        )


def test_enqueuing_many_runs_opens_no_connection_per_run(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pg_home(home) as env:
        monkeypatch.setenv("TETHER_API_KEY_DATABASE", env["TETHER_API_KEY_DATABASE"])
        _enqueue_many(home)


def _enqueue_many(home: Path) -> None:
    with Runtime.open(home) as runtime:
        durable.enqueue_segment(runtime, "warm-up", 0)  # the client and its first connection
        before = _sessions(runtime)
        for n in range(20):
            durable.enqueue_segment(runtime, f"run-{n}", 0)
            durable.segment_status(runtime, f"run-{n}", 0)
        # The pool's connections are reused; a client per call would have opened 40 sessions.
        assert _sessions(runtime) - before <= 2
        with durable.client(runtime) as c:
            found = c.list_workflows(workflow_ids=[durable.segment_id(f"run-{n}", 0) for n in range(20)])
        assert {w.status for w in found} == {"ENQUEUED"} and len(found) == 20


def test_the_client_is_kept_per_runtime_and_closed_with_it(home: Path) -> None:
    runtime = Runtime.open(home)
    first = durable.shared_client(runtime)
    with durable.client(runtime) as again:
        assert again is first
    runtime.close()
    assert durable.SHARED_CLIENT not in runtime.db.attached
    with Runtime.open(home) as other:
        assert durable.shared_client(other) is not first


def test_a_forked_child_opens_its_own_client(home: Path) -> None:
    with Runtime.open(home) as runtime:
        parents = durable.shared_client(runtime)
        pid = os.fork()
        if pid == 0:  # the child: its parent's connections are not its to use
            try:
                mine = durable.shared_client(runtime)
                mine.list_workflows(workflow_ids=["nothing"])
                os._exit(0 if mine is not parents else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert durable.shared_client(runtime) is parents  # and the parent's is still its own
        parents.list_workflows(workflow_ids=["nothing"])
