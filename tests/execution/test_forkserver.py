import os
import signal
from pathlib import Path

from tests.support.helpers import wait_for
from tether.execution.executor import Executor
from tether.execution.protocol import read_exit
from tether.execution.spawner import ForkServerSpawner
from tether.tasks.result import TaskStatus


def test_each_task_gets_a_fresh_process_in_its_own_session(support: Executor) -> None:
    assert isinstance(support.spawner, ForkServerSpawner)
    pids = set()
    for _ in range(3):
        result = support.execute_sync("t.quick_bg", caller="agent")
        paths = support.jobs.paths(result.execution_id)
        eid = result.execution_id
        record = wait_for(lambda eid=eid: (r := support.jobs.status(eid)).status.terminal and r)
        assert record.status is TaskStatus.COMPLETED
        pid = support.store.get(result.execution_id).pid  # type: ignore[union-attr]
        pids.add(pid)
        wait_for(lambda paths=paths: read_exit(paths) == 0, what="the fork server to record the exit code")
    assert len(pids) == 3 and os.getpid() not in pids


def test_worker_leads_its_own_process_group(running_game: Executor) -> None:
    job = running_game.execute_sync("demo.loop_farm", caller="agent")
    pid = job.data["pid"]
    assert os.getpgid(pid) == pid and os.getsid(pid) == pid


def test_a_dead_fork_server_is_restarted(support: Executor) -> None:
    spawner = support.spawner
    assert isinstance(spawner, ForkServerSpawner)
    assert support.execute_sync("t.quick", caller="agent").status is TaskStatus.COMPLETED
    server = spawner._server
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    server.wait(timeout=30)
    assert support.execute_sync("t.quick", caller="agent").status is TaskStatus.COMPLETED


def test_fork_server_exits_when_its_parent_goes(support: Executor, home: Path) -> None:
    spawner = support.spawner
    assert isinstance(spawner, ForkServerSpawner)
    support.warm_up()
    assert support.execute_sync("t.quick", caller="agent").status is TaskStatus.COMPLETED
    server = spawner._server
    assert server is not None and server.stdin is not None
    server.stdin.close()  # what the OS does when this process dies
    assert server.wait(timeout=30) == 0


def test_fork_server_exits_when_its_parent_dies_and_a_fork_holds_its_stdin(home: Path) -> None:
    """An orphaned fork server lingered for hours: its executor had died, but a process the executor
    forked (without exec) still held the write end of the server's stdin, so no EOF ever came."""
    import subprocess
    import sys

    from tests.support.helpers import ROOT, exited

    script = f"""
import os, sys, time
from tests.support.registry import registry
from tether.execution.executor import Executor
executor = Executor(registry, home={str(home)!r})
assert executor.execute_sync("t.quick", caller="agent").status.value == "completed"
if os.fork() == 0:  # a child that inherits every descriptor, and outlives its parent
    os.setsid()
    time.sleep(60)
    os._exit(0)
print(executor.spawner._server.pid, flush=True)
time.sleep(60)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    server = int(proc.stdout.readline())
    holder = [p for p in _children_of(proc.pid) if p != server]
    proc.kill()
    proc.wait(timeout=10)
    proc.stdout.close()  # the holder keeps the pipe open: do not wait for its end
    try:
        wait_for(lambda: exited(server), timeout=30, what="the orphaned fork server to exit")
    finally:
        for pid in holder:
            os.kill(pid, signal.SIGKILL)


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


def test_any_home_path_works_and_answers_never_mismatch(tmp_path: Path) -> None:
    """A newline in the home's path broke every worker start ("it was not our child"): the fork server's
    protocol was one line each way. Any path works now, and each answer names the request it answers."""
    from tests.support.helpers import FAST
    from tests.support.registry import registry

    for name in ("with\nnewline", "spawn x\nspawn y", "tab\there", "space at end ", "名字 ✓"):
        home = tmp_path / name
        home.mkdir()
        with Executor(registry, home=home, settings=FAST) as executor:
            assert isinstance(executor.spawner, ForkServerSpawner)
            for _ in range(2):
                result = executor.execute_sync("t.quick", caller="agent")
                assert result.status is TaskStatus.COMPLETED, (name, result.message)
