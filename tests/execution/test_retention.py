"""Retention: ended executions go (folders and records) by age and count; live ones never do."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tests.support.helpers import tether_cli, wait_for
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths, read_exit
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


def test_prune_reports_the_disk_blocks_it_frees_counting_each_inode_once(
    support: Executor, home: Path, tmp_path: Path
) -> None:
    """What prune reports is what ``du`` sees go: allocated blocks (many small files take far more disk
    than their sizes add up to), a hard link counted once, a symbolic link's target not at all, and a
    file another name outside keeps is not freed."""
    done = [support.execute_sync("t.quick", caller="cli").execution_id for _ in range(3)]
    gone = [ExecutionPaths.of(home, e).dir for e in done[:2]]

    # The worker's exit code is the last file written: measure once nothing else will be.
    def exited() -> bool:
        support.spawner.reap()  # a spawner that reaps only when asked writes the exit code now
        return all(read_exit(ExecutionPaths(folder)) is not None for folder in gone)

    wait_for(exited, what="the workers' exit codes")
    for index in range(40):
        (gone[0] / f"small-{index}.txt").write_text("x")
    os.link(gone[0] / "small-0.txt", gone[0] / "small-0.again")  # one inode, two names
    os.link(gone[0] / "small-1.txt", gone[1] / "small-1.elsewhere")  # one inode in two pruned folders
    outside = tmp_path / "big.bin"
    outside.write_bytes(os.urandom(1 << 20))
    (gone[1] / "big.link").symlink_to(outside)
    kept_elsewhere = tmp_path / "kept.bin"
    (gone[1] / "shared.bin").write_bytes(os.urandom(1 << 16))
    os.link(gone[1] / "shared.bin", kept_elsewhere)  # still named outside: pruning frees nothing of it
    du = subprocess.run(
        ["du", "-s", "-c", "-B1", *map(str, gone)], capture_output=True, text=True, check=True
    )
    expected = int(du.stdout.splitlines()[-1].split()[0]) - os.stat(kept_elsewhere).st_blocks * 512

    preview = support.prune(keep=1, older_than_days=0, dry_run=True)
    pruned = support.prune(keep=1, older_than_days=0)

    assert set(pruned.executions) == set(done[:2]) and not any(folder.exists() for folder in gone)
    assert pruned.bytes_freed == preview.bytes_freed == expected
    assert kept_elsewhere.stat().st_size == 1 << 16 and outside.stat().st_size == 1 << 20


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
    code, out, _ = tether_cli("job", "prune", "--keep", "1", "--json", home=home)
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
