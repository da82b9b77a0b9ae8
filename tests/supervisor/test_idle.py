"""An idle executor does not pay for DBOS's polls (``supervisor/idle.py``): they run only while a
workflow of the home's queue waits to start. Checked on DBOS's own system database objects, on SQLite
and on PostgreSQL, and in a launched executor."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.support.helpers import ROOT
from tether.supervisor import durable, idle


@pytest.fixture
def sys_db(database_url: str, tmp_path: Path) -> Iterator[tuple[Any, Any, durable.Names]]:
    """DBOS's system database object for a fresh installation, through a real ``DBOSClient``."""
    if database_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    else:
        url = sa.engine.make_url(database_url).set(drivername="postgresql").render_as_string(False)
    own = durable.names("1d1e000000000001")
    durable.prepare(url, own, concurrency=16)
    client = durable._client(url, own)
    try:
        yield client, client._sys_db, own
    finally:
        client.destroy()


def _counting(sys_db: Any) -> dict[str, int]:
    """Count the calls that reach DBOS's own methods (installed under the gate, as at launch)."""
    calls = {"dequeue_scopes": 0, "get_queue": 0}
    for name in calls:
        original = getattr(sys_db, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _original(*args, **kwargs)

        setattr(sys_db, name, counted)
    return calls


def _enqueue(client: Any, queue: str, version: str, workflow_id: str) -> None:
    client.enqueue(
        {"workflow_name": "tether.test_nothing", "queue_name": queue, "workflow_id": workflow_id,
         "app_version": version}
    )  # fmt: skip


def test_a_poll_reaches_dbos_only_while_a_workflow_of_the_queue_waits(sys_db: Any) -> None:
    client, db, own = sys_db
    calls = _counting(db)
    gate = idle.quiet_when_idle(db, own.queue)

    assert db.dequeue_scopes(own.queue) == [] and calls["dequeue_scopes"] == 0  # nothing waits
    _enqueue(client, "another-queue", own.version, "elsewhere")  # not this queue's
    assert db.dequeue_scopes(own.queue) == [] and calls["dequeue_scopes"] == 0
    assert db.dequeue_scopes("another-queue") == [None] and calls["dequeue_scopes"] == 1  # not gated

    _enqueue(client, own.queue, own.version, "waiting")
    assert db.dequeue_scopes(own.queue) == [None] and calls["dequeue_scopes"] == 2

    client.cancel_workflow("waiting")  # it no longer waits to start
    assert db.dequeue_scopes(own.queue) == [] and calls["dequeue_scopes"] == 2
    gate.close()


def test_the_queues_settings_are_read_again_once_a_second_not_on_every_poll(sys_db: Any) -> None:
    _, db, own = sys_db
    calls = _counting(db)
    idle.quiet_when_idle(db, own.queue).close()
    first = db.get_queue(own.queue)
    assert first is not None and first.name == own.queue
    assert all(db.get_queue(own.queue) is first for _ in range(20)) and calls["get_queue"] == 1
    db.get_queue("another-queue")  # other queues are DBOS's business, read every time
    assert calls["get_queue"] == 2


def test_a_database_that_does_not_answer_lets_dboss_own_poll_run_and_report_it(tmp_path: Path) -> None:
    class Unreachable:
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'missing' / 'dbos.sqlite'}")
        schema = None

    assert idle.Waiting(Unreachable(), "q").any() is True


LAUNCH = """
import asyncio
from tether.execution.executor import Executor
from tether.runtime import Runtime
from tether.supervisor import durable, engine
from tether.toolkits.standard import registry

async def main() -> None:
    with Runtime.open() as rt, Executor(registry, runtime=rt) as executor:
        await engine.launch(rt, executor)
        try:
            print(durable.instance()._sys_db.dequeue_scopes.__qualname__)
        finally:
            engine.shutdown()

asyncio.run(main())
"""


def test_a_launched_executor_has_its_polls_gated(home: Path) -> None:
    """The hook is in place where it matters (and a DBOS upgrade that renamed what it hooks fails here
    and in the tests above, not silently in a person's CPU bill)."""
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "quiet_when_idle.<locals>.scopes"
