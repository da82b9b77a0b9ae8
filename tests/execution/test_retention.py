"""Retention: ended executions go (folders and records) by age and count; live ones never do."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.support.helpers import tether_cli
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths
from tether.tasks.result import TaskStatus


def test_ended_executions_beyond_the_newest_are_removed_and_live_ones_kept(
    support: Executor, home: Path
) -> None:
    done = [support.execute_sync("t.quick", caller="cli").execution_id for _ in range(12)]
    live = support.execute_sync("t.loops", caller="cli", detach=True)
    assert live.status is TaskStatus.RUNNING
    preview = support.prune(keep=5, older_than_days=0, dry_run=True)
    assert len(preview.executions) == 7 and all(ExecutionPaths.of(home, e).dir.exists() for e in done)
    pruned = support.prune(keep=5, older_than_days=0)
    assert set(pruned.executions) == set(done[:7]) and pruned.bytes_freed > 0
    for execution_id in done[:7]:
        assert (
            not ExecutionPaths.of(home, execution_id).dir.exists() and support.store.get(execution_id) is None
        )
    for execution_id in [*done[7:], live.execution_id]:
        assert support.store.get(execution_id) is not None
    assert support.jobs.status(live.execution_id).status is TaskStatus.RUNNING


def test_old_executions_go_by_age(support: Executor, home: Path) -> None:
    old = support.execute_sync("t.quick", caller="cli").execution_id
    with support.store.db.write() as conn:  # as if it ended forty days ago
        conn.exec_driver_sql(
            "UPDATE jobs SET ended_at = '2000-01-01T00:00:00+00:00' WHERE execution_id = ?", (old,)
        )
    new = support.execute_sync("t.quick", caller="cli").execution_id
    pruned = support.prune(older_than_days=30, keep=0)
    assert pruned.executions == (old,) and support.store.get(new) is not None


def test_the_command_line_prunes_and_says_what_it_did(home: Path) -> None:
    for _ in range(4):
        tether_cli("task", "run", "demo.status", home=home)
    code, out, _ = tether_cli("job", "prune", "--keep", "1", "--older-than-days", "0", "--json", home=home)
    assert code == 0 and json.loads(out)["executions"] == 3
    code, out, _ = tether_cli("job", "list", "--json", home=home)
    assert len(json.loads(out)) == 1


def test_opening_a_home_applies_retention_at_most_every_so_often(support: Executor, home: Path) -> None:
    (home / "settings.toml").write_text("[store]\nkeep_executions = 2\nkeep_days = 0\n")
    from tests.support.registry import registry

    for _ in range(5):
        support.execute_sync("t.quick", caller="cli")
    with Executor(registry, home=home) as fresh:
        fresh.maintain()
        assert len(fresh.store.list(limit=100)) == 2
        for _ in range(3):
            fresh.execute_sync("t.quick", caller="cli")
        fresh.maintain()  # within the hour: nothing pruned again
        assert len(fresh.store.list(limit=100)) == 5
        marker = home / "logs" / ".pruned"
        os.utime(marker, (time.time() - 7200, time.time() - 7200))
        fresh.maintain()
        assert len(fresh.store.list(limit=100)) == 2
