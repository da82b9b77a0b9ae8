"""Crash windows and races of the execution core, each hit on purpose with real processes.

Every test reproduces one finding of the outside audit. Fault points (``tether.execution.faults``)
stop a process at the exact moment that matters — between the spawn and the record, before the claim,
before the handshake — instead of hoping that a random kill lands in a window of microseconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.figures import count
from tests.support.helpers import FAST, ROOT, exited, wait_for
from tether.execution.executor import Executor
from tether.execution.lock import holder
from tether.execution.protocol import ExecutionPaths, read_claim, read_result
from tether.tasks.result import TaskStatus

SUPPORT = "tests.support.registry:registry"


def cli(home: Path, *args: str, faults: str = "", **env: str) -> subprocess.Popen[str]:
    """A real ``tether`` process on the support registry, with fault points armed."""
    return subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", SUPPORT, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env={
            **os.environ,
            "TETHER_HOME": str(home),
            "TETHER_FAULTS": faults,
            "TETHER_WORKER_ENV": "TETHER_FAULTS",
            "TETHER_STOP_GRACE_COOPERATIVE_S": "1",
            "TETHER_STOP_GRACE_INTERRUPT_S": "1",
            **env,
        },
    )


def only_job(executor: Executor) -> str:
    jobs = wait_for(lambda: executor.store.list(limit=5), what="the job's record")
    assert len(jobs) == 1, jobs
    return jobs[0].execution_id


def lock_is_free(home: Path) -> bool:
    return holder(home, ["automation"]) is None


def stop(executor: Executor, execution_id: str) -> Any:
    return asyncio.run(executor.control(execution_id, "stop", caller="cli"))


def not_stuck(executor: Executor) -> None:
    """The home is usable: the next task on the same resource runs at once, nothing stays pending."""
    assert executor.execute_sync("t.holds_lock", caller="cli").status is TaskStatus.COMPLETED
    for job in executor.jobs_for("cli", active=True):
        pytest.fail(f"{job.execution_id} is still {job.status}")


@pytest.mark.parametrize("detach", [True, False], ids=["detached", "attached"])
def test_a_starter_killed_between_spawn_and_record_leaves_a_stoppable_job(
    support: Executor, home: Path, detach: bool
) -> None:
    """Audit 2.1: the worker runs, holding the lock, while the row has no pid."""
    args = ["task", "run", "t.loops", "--json"] + (["--detach"] if detach else [])
    proc = cli(home, *args, faults="executor.after_spawn=kill")
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    count("kills tried")
    execution_id = only_job(support)
    assert support.store.get(execution_id).pid is None  # type: ignore[union-attr]
    claim = wait_for(lambda: read_claim(ExecutionPaths.of(home, execution_id)), what="the worker's claim")
    if detach:
        # Found through its own claim, recorded, never declared dead while it lives.
        status = support.jobs.status(execution_id)
        assert status.status in (TaskStatus.PENDING, TaskStatus.RUNNING)
        status = wait_for(
            lambda: (s := support.jobs.status(execution_id)).status is TaskStatus.RUNNING and s,
            what="the handshake",
        )
        assert status.data["pid"] == claim.pid
        assert holder(home, ["automation"])[1]["execution_id"] == execution_id  # type: ignore[index]
        stopped = stop(support, execution_id)
        assert stopped.status is TaskStatus.STOPPED, stopped
    else:
        # It watches its starter: with the starter gone, it stops itself.
        final = wait_for(
            lambda: (s := support.jobs.status(execution_id)).status.terminal and s, what="the worker to stop"
        )
        assert final.status is TaskStatus.STOPPED, final
    wait_for(lambda: exited(claim.pid), what="the worker to exit")
    assert lock_is_free(home)
    not_stuck(support)
    count("homes left stuck", 0)


def test_a_busy_store_between_spawn_and_record_still_reports_the_started_job(
    support: Executor, home: Path, tmp_path: Path
) -> None:
    """Audit 2.1, busy-store variant: the CLI said "store not writable" and exited 2 although it started."""
    reached, go = tmp_path / "reached", tmp_path / "go"
    proc = cli(
        home,
        "task",
        "run",
        "t.loops",
        "--detach",
        "--json",
        faults=f"executor.after_spawn=touch:{reached}+wait:{go}",
        TETHER_BUSY_TIMEOUT_S="0.2",
    )
    wait_for(reached.exists, what="the CLI to spawn the worker")
    blocker = sqlite3.connect(home / "tether.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the store's write lock
    try:
        go.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert proc.returncode == 0, (out, err)
    started = json.loads(out)
    assert started["status"] == "running" and "Traceback" not in err
    # The row never got the pid; every reader finds the worker through its claim.
    status = support.jobs.status(started["execution_id"])
    assert status.status is TaskStatus.RUNNING and status.data["pid"] == started["data"]["pid"]
    assert stop(support, started["execution_id"]).status is TaskStatus.STOPPED
    assert lock_is_free(home)
    not_stuck(support)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_starter_killed_while_its_worker_starts_leaves_no_ghost(
    support: Executor, home: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """Audit 2.2: a pending row with no process blocked the resource for twice the handshake timeout."""
    reached, go = tmp_path / "reached", tmp_path / "go"
    proc = cli(
        home, "task", "run", "t.marks", "--json", faults=f"spawner.before_spawn=touch:{reached}+wait:{go}"
    )
    wait_for(reached.exists, what="the CLI to be about to spawn")
    proc.send_signal(sig)
    count("kills tried")
    if sig is not signal.SIGKILL:
        # Once the CLI has taken the signal (its stop request is on disk), let the spawn in progress
        # finish: the worker it starts must honour the request and run nothing.
        wait_for(lambda: list((home / "executions").glob("*/stop.requested")), what="the stop request")
        go.touch()
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in out + err
    if sig is signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        # Ended as cleanly as Ctrl-C: one JSON document, an interrupted or stopped outcome.
        assert proc.returncode in (1, 130), (proc.returncode, out, err)
        document = json.loads(out)
        assert document.get("status") == "stopped" or document["error"]["code"] == "interrupted"
    execution_id = only_job(support)
    # The next reader settles it at once (no waiting out any timeout), and nothing ran.
    final = support.jobs.status(execution_id)
    assert final.status.terminal, final
    assert not (home / "handler-ran").exists()
    assert lock_is_free(home)
    not_stuck(support)
    count("homes left stuck", 0)


def test_a_torn_result_file_breaks_only_its_own_job(support: Executor, home: Path) -> None:
    """Audit 2.3: one torn result.json made every job, task and run command fail with a traceback."""
    job = support.execute_sync("t.loops", caller="cli", detach=True)
    assert job.status is TaskStatus.RUNNING
    paths = ExecutionPaths.of(home, job.execution_id)
    paths.result.write_bytes(b'{"protocol": 2, "pid": 1, "res')  # as if the disk lost its tail
    for args in (["job", "list"], ["job", "status", job.execution_id], ["task", "run", "t.quick"]):
        proc = cli(home, *args, "--json")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "Traceback" not in err, (args, out, err)
        json.loads(out)
        count("hostile inputs tried")
    # While its worker lives, the job keeps its last known state; once it is gone, the job says why.
    assert support.jobs.status(job.execution_id).status is TaskStatus.RUNNING
    os.killpg(job.data["pid"], signal.SIGKILL)
    wait_for(lambda: exited(job.data["pid"]), what="the worker to die")
    final = support.jobs.status(job.execution_id)
    assert final.status is TaskStatus.FAILED and "result.json is unreadable" in final.message
    not_stuck(support)


def test_results_are_published_durably(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Audit 2.3: the result is fsynced (file and folder) before anyone may read it as final."""
    from tether.execution import protocol
    from tether.tasks.result import TaskResult

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(protocol.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    paths = ExecutionPaths(tmp_path)
    result = TaskResult(task_id="t.x", execution_id="e", status=TaskStatus.COMPLETED)
    protocol.publish(paths, result)
    assert len(synced) >= 2  # the temp file, then the folder that now names it


def test_a_stop_before_the_worker_is_known_reaches_it_when_it_appears(
    support: Executor, home: Path, tmp_path: Path
) -> None:
    """Audit 2.4: "stopped" was answered at once while the worker went on to hold the lock and run."""
    spawned, go_cli, go_worker = tmp_path / "spawned", tmp_path / "go-cli", tmp_path / "go-worker"
    proc = cli(
        home,
        "task",
        "run",
        "t.marks",
        "--json",
        faults=f"executor.after_spawn=touch:{spawned}+wait:{go_cli},worker.before_claim=wait:{go_worker}",
    )
    wait_for(spawned.exists, what="the spawn")
    execution_id = only_job(support)
    paths = ExecutionPaths.of(home, execution_id)
    assert support.store.get(execution_id).pid is None and read_claim(paths) is None  # type: ignore[union-attr]

    outcome: list[Any] = []
    stopper = threading.Thread(target=lambda: outcome.append(stop(support, execution_id)))
    stopper.start()
    wait_for(paths.stop.exists, what="the stop request")
    assert stopper.is_alive()  # it waits for the worker instead of answering "stopped" blindly
    go_worker.touch()
    stopper.join(timeout=60)
    go_cli.touch()
    out, _ = proc.communicate(timeout=60)
    assert outcome and outcome[0].status is TaskStatus.STOPPED, outcome
    claim = read_claim(paths)
    assert claim is not None and claim.worker and exited(claim.pid)
    assert not (home / "handler-ran").exists()  # the stop reached it before its handler
    assert json.loads(out)["status"] == "stopped"
    assert lock_is_free(home)
    not_stuck(support)


def test_a_stop_records_stopped_only_once_the_worker_is_gone(
    support: Executor, home: Path, tmp_path: Path
) -> None:
    """Audit 2.4: a worker that holds the lock before its handshake and does not poll for stops."""
    spawned, locked = tmp_path / "spawned", tmp_path / "locked"
    proc = cli(
        home,
        "task",
        "run",
        "t.marks",
        faults=f"executor.after_spawn=touch:{spawned}+wait:{tmp_path / 'never'},"
        f"worker.before_handshake=touch:{locked}+wait:{tmp_path / 'never'}",
    )
    try:
        wait_for(locked.exists, what="the worker to hold the lock")
        execution_id = only_job(support)
        result = stop(support, execution_id)
        assert result.status is TaskStatus.STOPPED and result.data["stop_step"] in ("interrupt", "kill")
        claim = read_claim(ExecutionPaths.of(home, execution_id))
        assert claim is not None and exited(claim.pid)
        assert lock_is_free(home) and not (home / "handler-ran").exists()
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    not_stuck(support)


def test_contenders_are_told_the_real_holder(support: Executor, home: Path) -> None:
    """Audit 2.5: 28 % of refusals named a job that never ran."""
    refusals = 0
    for _ in range(3):
        procs = [cli(home, "task", "run", "t.holds_lock", "--json") for _ in range(6)]
        results = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
        ran = [r for r in results if r["status"] == "completed"]
        assert ran, results
        for refused in (r for r in results if r["status"] == "rejected"):
            refusals += 1
            named = support.store.get(refused["data"]["blocked_by"])
            assert named is not None and named.status is TaskStatus.COMPLETED, refused
        spans = sorted((r["data"]["began"], r["data"]["ended"]) for r in ran)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans  # never overlapped
    count("contended refusals checked", refusals)


FINISH = """
import sys
from pathlib import Path
from tether.config import Settings
from tether.installation import installation_id
from tether.execution.jobs import JobManager
from tether.store.database import Database, default_url
from tether.store.jobs import SqlJobStore
from tether.tasks.result import TaskStatus
home, eid, status = Path(sys.argv[1]), sys.argv[2], TaskStatus(sys.argv[3])
db = Database(default_url(home), installation=installation_id(home))
manager = JobManager(home, SqlJobStore(db), Settings())
manager.finish(manager.record(eid), manager.paths(eid), status, f"finished as {status.value}")
"""


def finisher(home: Path, execution_id: str, status: str, faults: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", FINISH, str(home), execution_id, status],
        cwd=ROOT,
        env={**os.environ, "TETHER_FAULTS": faults},
    )


def test_two_finishers_of_one_dead_job_agree_in_both_places(
    support: Executor, home: Path, tmp_path: Path
) -> None:
    """Audit 2.6: result.json and the store could end with different terminal states.

    The first finisher is held after it read the file (empty) and before it writes; the second one
    arrives meanwhile. Without one writer at a time both would write, and each place keep another."""
    job = support.execute_sync("t.hangs_free", caller="cli", detach=True)
    os.killpg(job.data["pid"], signal.SIGKILL)
    wait_for(lambda: exited(job.data["pid"]), what="the kill")
    read, go, arrived = tmp_path / "read", tmp_path / "go", tmp_path / "arrived"
    first = finisher(home, job.execution_id, "failed", f"publish.after_read=touch:{read}+wait:{go}")
    wait_for(read.exists, what="the first finisher to read the empty file")
    second = finisher(home, job.execution_id, "stopped", f"publish.before_lock=touch:{arrived}")
    wait_for(arrived.exists, what="the second finisher to arrive")
    go.touch()
    assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    published = read_result(ExecutionPaths.of(home, job.execution_id))
    record = support.store.get(job.execution_id)
    assert published is not None and record is not None
    assert published.status is record.status is TaskStatus.FAILED  # the one that wrote first won
    assert published.message == record.message == "finished as failed"


def test_a_hand_written_request_is_refused_by_the_worker(support: Executor, home: Path) -> None:
    """Audit 1: a destructive request written by hand into the home ran without any confirmation."""
    from tether.execution.protocol import Confirmation, Request, request_key, sign, write_request
    from tether.tasks.confirm import call_digest

    def run_by_hand(execution_id: str, *, signed: bool, confirmation: Confirmation | None) -> Any:
        request = Request(
            execution_id=execution_id,
            task_id="t.destroys",
            registry_ref=SUPPORT,
            caller="cli",
            params={"what": "everything"},
            confirmation=confirmation,
            home=str(home),
            background=False,
            detach=True,
            parent_pid=os.getpid(),
            parent_create_time=0.0,
            parent_poll_s=0.1,
            stop_grace_s=1.0,
            created_at=0.0,
        )
        key = request_key(home)
        assert key is not None
        paths = ExecutionPaths.of(home, execution_id)
        write_request(paths, sign(request, key) if signed else request)
        subprocess.run(
            [sys.executable, "-m", "tether.execution.worker", str(paths.dir)],
            cwd=ROOT,
            timeout=60,
            check=True,
        )
        return read_result(paths)

    digest = call_digest("t.destroys", {"what": "everything"})
    unsigned = run_by_hand(
        "by-hand-1", signed=False, confirmation=Confirmation(digest=digest, source="me", nonce="n")
    )
    assert unsigned.status is TaskStatus.REJECTED and "signature" in unsigned.message
    unconfirmed = run_by_hand("by-hand-2", signed=True, confirmation=None)
    assert unconfirmed.status is TaskStatus.REJECTED and "confirmation" in unconfirmed.message
    other = call_digest("t.destroys", {"what": "nothing"})
    mismatched = run_by_hand(
        "by-hand-3", signed=True, confirmation=Confirmation(digest=other, source="me", nonce="n")
    )
    assert mismatched.status is TaskStatus.REJECTED and "other arguments" in mismatched.message
    assert not (home / "destroyed").exists()
    # The same request, confirmed for exactly these arguments, runs — once.
    confirmed = run_by_hand(
        "by-hand-4", signed=True, confirmation=Confirmation(digest=digest, source="me", nonce="n")
    )
    assert confirmed.status is TaskStatus.COMPLETED
    subprocess.run(
        [sys.executable, "-m", "tether.execution.worker", str(ExecutionPaths.of(home, "by-hand-4").dir)],
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    assert (home / "destroyed").read_text() == "x"  # running the same execution again did nothing


def test_workers_get_an_allowlisted_environment(make_executor: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Audit 1: OPENAI_API_KEY and other providers' variables reached workers."""
    from tests.support.registry import registry

    secrets_ = {
        "OPENAI_API_KEY": "sk-x",
        "DEEPSEEK_API_KEY": "x",
        "TETHER_API_KEY": "x",
        "TETHER_API_KEY_QWEN": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "GITHUB_TOKEN": "x",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/x",
        "SOMETHING_ELSE": "x",
    }
    for name, value in secrets_.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MY_TASK_NEEDS", "yes")
    for forkserver in (True, False):
        settings = FAST.model_copy(update={"forkserver": forkserver, "worker_env": ("MY_TASK_NEEDS",)})
        result = make_executor(registry, settings).execute_sync("t.environment", caller="cli")
        names = set(result.data["names"])
        assert not names & set(secrets_), names & set(secrets_)
        assert {"PATH", "MY_TASK_NEEDS"} <= names


FAULT_POINTS = (
    "spawner.before_spawn",
    "executor.before_spawn",
    "executor.after_spawn",
    "worker.before_claim",
    "worker.after_claim",
    "worker.before_handshake",
    "worker.after_handshake",
    "executor.before_liveness",
    "publish.before_lock",
    "publish.after_read",
)


@pytest.mark.parametrize("point", FAULT_POINTS)
@pytest.mark.parametrize("task", ["t.loops --detach", "t.marks"])
def test_a_kill_at_any_fault_point_never_leaves_the_home_stuck(
    support: Executor, home: Path, point: str, task: str
) -> None:
    """SIGKILL whichever process reaches the point first (the CLI or its worker): afterwards every job
    settles at once or is a live, stoppable worker, nothing holds a lock it should not, the next task runs."""
    proc = cli(home, "task", "run", *task.split(), "--json", faults=f"{point}=kill")
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err
    count("kills tried")
    execution_id = only_job(support)
    paths = ExecutionPaths.of(home, execution_id)

    def settled() -> Any:
        status = support.jobs.status(execution_id)
        return status if status.status.terminal or status.status is TaskStatus.RUNNING else None

    status = wait_for(settled, what=f"job after a kill at {point}")
    if status.status is TaskStatus.RUNNING:
        stop(support, execution_id)
    claim = read_claim(paths)
    if claim is not None and claim.worker:
        wait_for(lambda: exited(claim.pid), what="the worker to be gone")
    assert support.jobs.status(execution_id).status.terminal
    assert lock_is_free(home)
    not_stuck(support)
    count("homes left stuck", 0)


def test_the_workers_claim_wins_over_a_wrong_pid_in_the_row(support: Executor, home: Path) -> None:
    """Review: a retried spawn can leave the row naming a process that exited while the claimer runs."""
    job = support.execute_sync("t.loops", caller="cli", detach=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with support.store.db.write() as conn:  # the row names a process that already exited
        conn.exec_driver_sql(
            "UPDATE jobs SET pid = ?, create_time = ? WHERE execution_id = ?",
            (gone.pid, 1.0, job.execution_id),
        )
    assert support.jobs.status(job.execution_id).status is TaskStatus.RUNNING  # not declared dead
    stopped = stop(support, job.execution_id)
    assert stopped.status is TaskStatus.STOPPED
    wait_for(lambda: exited(job.data["pid"]), what="the real worker to be stopped")
    assert lock_is_free(home)


def test_a_damaged_request_key_is_replaced_not_a_stuck_home(support: Executor, home: Path) -> None:
    """Review: an empty keys/request.key made every worker refuse every request."""
    assert support.execute_sync("t.quick", caller="cli").status is TaskStatus.COMPLETED
    (home / "keys" / "request.key").write_bytes(b"")
    assert support.execute_sync("t.quick", caller="cli").status is TaskStatus.COMPLETED
    assert len((home / "keys" / "request.key").read_bytes()) == 32


def test_giving_up_an_execution_whose_folder_does_not_exist_yet_still_bars_its_worker(home: Path) -> None:
    """Review: abandon() did nothing without the folder, so a late starter could still run the job."""
    from tether.execution.protocol import abandon, claim_for_worker

    paths = ExecutionPaths.of(home, "not-yet")
    claim = abandon(paths, "the starter stalled")
    assert claim.abandoned == "the starter stalled"
    assert not claim_for_worker(paths, os.getpid(), 1.0)  # a worker arriving now finds it taken
