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
