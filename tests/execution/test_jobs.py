import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import FAST, ROOT, exited, tether_cli, wait_for
from tether.errors import JobNotFound
from tether.execution.executor import Executor
from tether.execution.jobs import JobManager
from tether.execution.protocol import ExecutionPaths, last_progress, read_result
from tether.installation import installation_id
from tether.store.database import Database, default_url
from tether.store.jobs import SqlJobStore
from tether.tasks.result import TaskStatus


def stop(executor: Executor, execution_id: str):  # type: ignore[no-untyped-def]
    return asyncio.run(executor.jobs.stop(execution_id))


def test_cooperative_stop(running_game: Executor) -> None:
    job = running_game.execute_sync("demo.loop_farm", caller="agent")
    paths = running_game.jobs.paths(job.execution_id)
    wait_for(lambda: last_progress(paths), what="the first round")
    result = stop(running_game, job.execution_id)
    assert result.status is TaskStatus.STOPPED
    assert result.data["stop_step"] == "cooperative"
    assert result.data["rounds_done"] >= 1
    # The lock is free again: the next task runs.
    assert running_game.execute_sync("demo.daily_training", caller="agent").status is TaskStatus.COMPLETED


def test_sigint_step_stops_a_task_that_ignores_the_cooperative_request(support: Executor) -> None:
    job = support.execute_sync("t.ignores_stop", caller="agent")
    result = stop(support, job.execution_id)
    assert result.status is TaskStatus.STOPPED, result
    assert result.data["stop_step"] == "interrupt"


def test_tree_kill_ends_a_hung_task_and_its_children(executor: Executor) -> None:
    job = executor.execute_sync("demo.debug_hang", caller="cli")
    paths = executor.jobs.paths(job.execution_id)
    event = wait_for(lambda: last_progress(paths), what="the hang task to start its child")
    child = int(event["child_pid"])
    assert not exited(child)
    result = stop(executor, job.execution_id)
    assert result.status is TaskStatus.STOPPED
    assert result.data["stop_step"] == "kill"
    wait_for(lambda: exited(child) and exited(job.data["pid"]), what="the worker and its child to die")
    # Its lock went with it.
    again = executor.execute_sync("demo.debug_hang", caller="cli")
    assert again.status is TaskStatus.RUNNING
    os.killpg(again.data["pid"], signal.SIGKILL)  # it ignores stops: ended here, not by the teardown's graces


def test_stopping_an_ended_job_changes_nothing(running_game: Executor) -> None:
    done = running_game.execute_sync("demo.daily_training", caller="agent")
    again = stop(running_game, done.execution_id)
    assert again.status is TaskStatus.COMPLETED
    assert again.data["already_ended"] is True
    assert again.message == done.message


def test_late_stop_never_overwrites_completed(support: Executor) -> None:
    """Race stop against a background task that completes at once, many times."""
    outcomes = {TaskStatus.COMPLETED: 0, TaskStatus.STOPPED: 0}
    for _ in range(40):
        job = support.execute_sync("t.quick_bg", caller="agent")
        if job.status is TaskStatus.COMPLETED:  # finished before the handshake was even observed
            outcomes[TaskStatus.COMPLETED] += 1
            continue
        assert job.status is TaskStatus.RUNNING, job
        result = stop(support, job.execution_id)
        published = read_result(support.jobs.paths(job.execution_id))
        assert published is not None
        assert result.status is published.status, (result, published)
        outcomes[result.status] += 1
        # Whatever won, later stops and reconciliations keep it.
        assert stop(support, job.execution_id).status is result.status
        assert support.jobs.status(job.execution_id).status is result.status
    assert outcomes[TaskStatus.COMPLETED] > 0


def test_job_started_in_one_process_is_stopped_from_another(running_game: Executor, home: Path) -> None:
    code, out, err = tether_cli("task", "run", "demo.loop_farm", "--detach", "--json", home=home)
    assert code == 0, err
    execution_id = json.loads(out)["execution_id"]
    # This process never saw that job start: it finds it in the store.
    assert running_game.jobs.status(execution_id).status is TaskStatus.RUNNING
    assert stop(running_game, execution_id).status is TaskStatus.STOPPED

    job = running_game.execute_sync("demo.loop_farm", caller="agent")
    code, out, err = tether_cli("job", "stop", job.execution_id, "--json", home=home)
    assert code == 0, err
    assert json.loads(out)["status"] == "stopped"
    assert running_game.jobs.status(job.execution_id).status is TaskStatus.STOPPED


def test_startup_recovery(running_game: Executor, support: Executor, home: Path) -> None:
    live = _detached(home, "demo.loop_farm", {})
    crashed = _start_and_kill(support)

    manager = JobManager(
        home, SqlJobStore(Database(default_url(home), installation=installation_id(home))), FAST
    )
    recovery = manager.recover()
    assert recovery.reattached == (live,)
    assert recovery.failed == (crashed,)
    record = manager.store.get(crashed)
    assert record is not None and record.status is TaskStatus.FAILED and record.data["interrupted"] is True
    assert manager.status(live).status is TaskStatus.RUNNING
    assert stop(running_game, live).status is TaskStatus.STOPPED

    # A job that ended while nobody watched: its published result is adopted as it is.
    finished = _detached(home, "demo.loop_farm", {"rounds": 1})
    paths = ExecutionPaths.of(home, finished)
    wait_for(lambda: (r := read_result(paths)) is not None and r.status.terminal, what="the job to finish")
    assert manager.store.get(finished).status is TaskStatus.RUNNING  # type: ignore[union-attr]
    recovery = JobManager(
        home, SqlJobStore(Database(default_url(home), installation=installation_id(home))), FAST
    ).recover()
    assert recovery.adopted == (finished,)
    assert manager.status(finished).status is TaskStatus.COMPLETED


def _detached(home: Path, task_id: str, params: dict[str, object]) -> str:
    code, out, err = tether_cli(
        "task", "run", task_id, "--params", json.dumps(params), "--detach", "--json", home=home
    )
    assert code == 0, (out, err)
    return json.loads(out)["execution_id"]


def _start_and_kill(support: Executor) -> str:
    """A detached job whose worker is SIGKILLed behind the job manager's back."""
    job = support.execute_sync("t.hangs_free", caller="agent", detach=True)
    assert job.status is TaskStatus.RUNNING, job
    os.killpg(job.data["pid"], signal.SIGKILL)
    wait_for(lambda: exited(job.data["pid"]), what="the kill")
    return job.execution_id


def test_unknown_job_is_a_clear_error(executor: Executor) -> None:
    with pytest.raises(JobNotFound, match="no job with execution id 'nope'"):
        executor.jobs.status("nope")


def test_list_shows_newest_first_with_progress(running_game: Executor) -> None:
    job = running_game.execute_sync("demo.loop_farm", caller="agent")
    wait_for(lambda: last_progress(running_game.jobs.paths(job.execution_id)), what="progress")
    listed = running_game.jobs.list(active=True)
    assert [r.execution_id for r in listed] == [job.execution_id]
    assert listed[0].data["progress"]["message"].startswith("round")
    assert listed[0].data["pid"] == job.data["pid"]


def test_status_works_while_a_job_holds_the_lock(running_game: Executor, home: Path) -> None:
    job = running_game.execute_sync("demo.loop_farm", caller="agent")
    proc = subprocess.run(
        [sys.executable, "-m", "tether.interfaces.cli", "job", "status", job.execution_id, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "TETHER_HOME": str(home)},
    )
    assert json.loads(proc.stdout)["status"] == "running"


def test_a_stop_before_the_handshake_means_the_handler_never_runs(support: Executor, home: Path) -> None:
    async def scenario() -> tuple[object, object]:
        started: list[str] = []
        call = asyncio.create_task(
            support.execute("t.late_handshake", caller="agent", on_start=started.append)
        )
        deadline = asyncio.get_running_loop().time() + 15
        while not started:  # polled: the worker exists once on_start fired
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        stopped = await support.jobs.stop(started[0])
        return stopped, await call

    stopped, returned = asyncio.run(scenario())
    assert stopped.status is TaskStatus.STOPPED  # type: ignore[attr-defined]
    assert returned.status is TaskStatus.STOPPED  # type: ignore[attr-defined]
    assert not (home / "handler-ran").exists()


def test_a_wait_cancelled_as_it_is_woken_stays_cancelled() -> None:
    """Review (flaky CI): ``asyncio.wait_for`` on 3.11 lost a cancellation that arrived in the same
    loop turn as the wake-up, so a cancelled call followed its worker to the end instead of stopping it.
    Here the wake and the cancel are made to coincide every time."""
    from tether.execution.wake import Wake

    async def scenario() -> int:
        lost = 0
        wake = Wake()
        for _ in range(200):
            wake._event.clear()  # nothing pending from the round before
            waiting = asyncio.ensure_future(wake.wait(10.0))
            await asyncio.sleep(0)  # the wait is parked on the event
            wake._event.set()  # the doorbell rings …
            await asyncio.sleep(0)  # … the event's waiter is woken, the outer wait not yet resumed
            waiting.cancel()  # … and the caller gives up in that same turn
            try:
                await waiting
                lost += 1
            except asyncio.CancelledError:
                pass
        wake.close()
        return lost

    assert asyncio.run(scenario()) == 0
