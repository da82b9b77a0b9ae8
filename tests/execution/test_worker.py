import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import FAST, ROOT, exited, wait_for
from tether.config import Settings
from tether.execution.executor import Executor
from tether.execution.process import WORKER_FLAG, worker_command
from tether.execution.protocol import ExecutionPaths, read_result
from tether.execution.spawner import SubprocessSpawner
from tether.tasks.result import TaskStatus


def test_worker_dying_without_a_terminal_state_is_failed_with_its_exit_code(executor: Executor) -> None:
    result = executor.execute_sync("demo.debug_crash", caller="cli")
    assert result.status is TaskStatus.FAILED
    assert result.data["exit_code"] == 3
    assert "code 3" in result.message
    assert "exiting with code 3" in result.data["log_tail"]
    record = executor.store.get(result.execution_id)
    assert record is not None and record.status is TaskStatus.FAILED and record.exit_code == 3


def test_worker_dying_before_the_handshake_is_failed_not_running(support: Executor) -> None:
    result = support.execute_sync("t.dies_before_handshake", caller="agent")
    assert result.status is TaskStatus.FAILED
    assert result.data["exit_code"] == 7
    assert "interrupted" not in result.data  # it never claimed to be running


def test_silent_worker_is_killed_at_the_handshake_timeout(make_executor, home: Path) -> None:  # type: ignore[no-untyped-def]

    from tests.support.registry import registry

    executor = make_executor(registry, FAST.model_copy(update={"handshake_timeout_s": 1.0}))
    result = executor.execute_sync("t.silent", caller="agent")
    assert result.status is TaskStatus.FAILED
    assert "handshake" in result.message
    pid = result.data["pid"]
    wait_for(lambda: exited(pid), what="the silent worker to be killed")


def test_subprocess_spawner_runs_workers_too(make_executor) -> None:  # type: ignore[no-untyped-def]
    from tests.support.registry import registry

    executor = make_executor(registry, spawner=SubprocessSpawner())
    assert executor.execute_sync("t.quick", caller="agent").status is TaskStatus.COMPLETED
    crashed = make_executor(spawner=SubprocessSpawner()).execute_sync("demo.debug_crash", caller="cli")
    assert crashed.status is TaskStatus.FAILED and crashed.data["exit_code"] == 3


def test_source_worker_command_uses_this_interpreter(tmp_path: Path) -> None:
    assert worker_command(tmp_path) == [sys.executable, "-m", "tether.execution.worker", str(tmp_path)]


def test_frozen_worker_command_re_enters_the_app(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/app/tether-app")
    assert worker_command(tmp_path) == ["/opt/app/tether-app", WORKER_FLAG, str(tmp_path)]


def test_frozen_app_really_runs_a_worker(make_executor, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A stand-in for a PyInstaller app: one executable whose entry point calls dispatch_frozen()."""
    from tests.support.registry import registry

    app = tmp_path / "frozen-app"
    app.write_text(
        f"#!/bin/sh\nexec {sys.executable} -c "
        "'import sys; from tether.execution.frozen import dispatch_frozen; dispatch_frozen(); "
        'sys.exit("not a worker call")\' "$@"\n'
    )
    app.chmod(0o755)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(app))
    executor = make_executor(registry, spawner=SubprocessSpawner())
    result = executor.execute_sync("t.quick", caller="agent")
    assert result.status is TaskStatus.COMPLETED, result


def test_non_detached_job_stops_when_its_starter_dies(home: Path, running_game: Executor) -> None:
    execution_id = _start_in_child(home, detach=False)
    paths = ExecutionPaths.of(home, execution_id)
    final = wait_for(lambda: _terminal(paths), what="the orphaned job to stop itself")
    assert final.status is TaskStatus.STOPPED
    assert final.data["stop_reason"] == "parent_exited"
    assert running_game.jobs.status(execution_id).status is TaskStatus.STOPPED


def test_detached_job_outlives_its_starter(home: Path, running_game: Executor) -> None:
    execution_id = _start_in_child(home, detach=True)
    paths = ExecutionPaths.of(home, execution_id)
    # It keeps making progress after the starter is gone (polled, not slept).
    first = wait_for(lambda: _rounds(paths) >= 1, what="progress")
    assert first
    seen = _rounds(paths)
    wait_for(lambda: _rounds(paths) > seen + 3, what="more progress with no starter")
    assert running_game.jobs.status(execution_id).status is TaskStatus.RUNNING
    import asyncio

    stopped = asyncio.run(running_game.jobs.stop(execution_id))
    assert stopped.status is TaskStatus.STOPPED


def _rounds(paths: ExecutionPaths) -> int:
    from tether.execution.protocol import last_progress

    event = last_progress(paths)
    return 0 if event is None else int(event.get("rounds_done", 0))


def _terminal(paths: ExecutionPaths):  # type: ignore[no-untyped-def]
    result = read_result(paths)
    return result if result is not None and result.status.terminal else None


def _start_in_child(home: Path, *, detach: bool) -> str:
    """Start demo.loop_farm from another process that then exits; returns the execution id."""
    code = (
        "import sys\n"
        "from tether.execution.executor import Executor\n"
        "from tether.toolkits.demo.registry import registry\n"
        "from tether.config import Settings\n"
        "ex = Executor(registry, settings=Settings(parent_poll_s=0.05, stop_grace_cooperative_s=0.5))\n"
        f"r = ex.execute_sync('demo.loop_farm', caller='cli', detach={detach})\n"
        "assert r.status.value == 'running', r\n"
        "print(r.execution_id)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "TETHER_HOME": str(home)},
    )
    return out.stdout.strip()


def test_worker_refuses_a_request_of_another_protocol(tmp_path: Path) -> None:
    paths = ExecutionPaths(tmp_path)
    paths.request.write_text('{"protocol": 99}')
    proc = subprocess.run(
        [sys.executable, "-m", "tether.execution.worker", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 3 and "protocol 99" in proc.stderr


def test_sigterm_to_a_worker_records_stopped(running_game: Executor, home: Path) -> None:
    result = running_game.execute_sync("demo.loop_farm", caller="agent")
    os.kill(result.data["pid"], signal.SIGTERM)
    paths = ExecutionPaths.of(home, result.execution_id)
    final = wait_for(lambda: _terminal(paths), what="the worker to handle SIGTERM")
    assert final.status is TaskStatus.STOPPED


def test_a_stop_signal_between_handshake_and_handler_still_records_stopped(  # type: ignore[no-untyped-def]
    make_executor, tmp_path: Path, monkeypatch
) -> None:
    """A SIGTERM that lands after the worker published "running" but before its handler started waits
    for the handler and stops it: the job ends stopped, never as a worker lost with nothing published."""
    from tests.support.registry import registry

    reached, go = tmp_path / "reached", tmp_path / "go"
    monkeypatch.setenv("TETHER_FAULTS", f"worker.after_handshake=touch:{reached}+wait:{go}")
    executor = make_executor(registry, settings=FAST.model_copy(update={"worker_env": ("TETHER_FAULTS",)}))
    result = executor.execute_sync("t.loops", caller="cli")
    assert result.status is TaskStatus.RUNNING, result
    wait_for(reached.exists, what="the worker between its handshake and its handler")
    os.kill(result.data["pid"], signal.SIGTERM)
    go.touch()
    paths = ExecutionPaths.of(executor.home, result.execution_id)
    final = wait_for(lambda: _terminal(paths), what="the worker to handle SIGTERM")
    assert final.status is TaskStatus.STOPPED, final


def test_settings_are_tunable(home: Path) -> None:
    assert Settings.load(home, {"TETHER_STOP_GRACE_KILL_S": "4"}).stop_grace_kill_s == 4.0


def test_workers_never_inherit_the_api_key_fallback(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tether.execution.environment import worker_env

    monkeypatch.setenv("TETHER_API_KEY", "sk-never-in-a-worker")
    monkeypatch.setenv("TETHER_API_KEY_DEEPSEEK", "sk-never-either")
    env = worker_env()
    assert "TETHER_API_KEY" not in env and "TETHER_API_KEY_DEEPSEEK" not in env and "PATH" in env


def test_a_handler_that_reports_without_end_cannot_fill_the_disk(tmp_path: Path) -> None:
    import logging

    from tether.execution import worker as worker_module
    from tether.execution.protocol import ExecutionPaths

    paths = ExecutionPaths(tmp_path / "e")
    ctx = worker_module.WorkerContext(
        execution_id="e", task_id="t.x", home=tmp_path, params=None, paths=paths, log=logging.getLogger("t")
    )
    line = "x" * 2000
    for _ in range(worker_module.MAX_PROGRESS_BYTES // 2000 + 500):
        ctx.progress(None, line)
    size = paths.events.stat().st_size
    assert size < worker_module.MAX_PROGRESS_BYTES * 1.5
    assert "are not kept" in paths.events.read_text(encoding="utf-8").splitlines()[-1]
