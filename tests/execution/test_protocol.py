import json
import threading
from pathlib import Path

import pytest

from tether.execution.protocol import (
    PROTOCOL,
    ExecutionPaths,
    ProtocolError,
    append_event,
    last_progress,
    publish,
    read_result,
)
from tether.tasks.result import TaskResult, TaskStatus


def result(status: TaskStatus, message: str = "") -> TaskResult:
    return TaskResult(task_id="t.x", execution_id="e1", status=status, message=message)


def test_result_file_carries_the_protocol_version(tmp_path: Path) -> None:
    paths = ExecutionPaths(tmp_path)
    publish(paths, result(TaskStatus.RUNNING))
    payload = json.loads(paths.result.read_text())
    assert payload["protocol"] == PROTOCOL and payload["result"]["status"] == "running"
    paths.result.write_text(json.dumps({**payload, "protocol": PROTOCOL + 1}))
    with pytest.raises(ProtocolError, match="protocol"):
        read_result(paths)


def test_publish_never_leaves_a_terminal_state(tmp_path: Path) -> None:
    paths = ExecutionPaths(tmp_path)
    assert publish(paths, result(TaskStatus.RUNNING)).status is TaskStatus.RUNNING
    assert publish(paths, result(TaskStatus.COMPLETED, "done")).status is TaskStatus.COMPLETED
    # A late writer gets the state that won back, and the file keeps it.
    assert publish(paths, result(TaskStatus.STOPPED)).status is TaskStatus.COMPLETED
    published = read_result(paths)
    assert published is not None and published.status is TaskStatus.COMPLETED and published.message == "done"


def test_readers_never_see_a_torn_result(tmp_path: Path) -> None:
    paths = ExecutionPaths(tmp_path)
    publish(paths, result(TaskStatus.RUNNING, "x" * 50_000))
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            publish(paths, result(TaskStatus.RUNNING, str(n) * 50_000))
            n = (n + 1) % 10

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(300):
            assert read_result(paths) is not None  # parses every time
    finally:
        stop.set()
        thread.join()


def test_last_progress_reads_the_newest_event(tmp_path: Path) -> None:
    paths = ExecutionPaths(tmp_path)
    assert last_progress(paths) is None
    for i in range(2000):
        append_event(paths, "progress", fraction=i / 2000, message=f"step {i}")
    append_event(paths, "log", message="not progress")
    event = last_progress(paths)
    assert event is not None and event["message"] == "step 1999"


def test_parallel_first_calls_on_a_fresh_home_all_sign_with_the_one_key(tmp_path: Path) -> None:
    """Found by the supervisor's first parallel wave: two threads that both found no key each made one,
    and the second replaced the key the first had already signed with — its worker refused."""
    from tether.execution.protocol import request_key

    for round_ in range(30):
        home = tmp_path / f"home{round_}"
        home.mkdir()
        barrier = threading.Barrier(8)
        keys: list[bytes | None] = []

        def first_use(
            home: Path = home, barrier: threading.Barrier = barrier, keys: list[bytes | None] = keys
        ) -> None:
            barrier.wait()
            keys.append(request_key(home))

        threads = [threading.Thread(target=first_use) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        on_disk = request_key(home, create=False)
        assert on_disk is not None and keys == [on_disk] * 8, f"round {round_}: {len(set(keys))} keys"


def test_the_claim_and_the_exit_code_survive_every_publication(tmp_path: Path) -> None:
    from tether.execution.protocol import claim_for_worker, read_claim, read_exit, write_exit

    paths = ExecutionPaths(tmp_path)
    assert claim_for_worker(paths, 111, 5.0) and read_result(paths) is None  # claimed, nothing published
    assert not claim_for_worker(paths, 112, 6.0)  # created exactly once
    publish(paths, result(TaskStatus.RUNNING))
    write_exit(paths, 3, pid=222)  # a second fork of a retried spawn: not the claimant
    assert read_exit(paths) is None
    write_exit(paths, 0, pid=111)
    publish(paths, result(TaskStatus.COMPLETED))  # a finisher after the reaper keeps both
    claim = read_claim(paths)
    assert claim is not None and (claim.pid, claim.create_time) == (111, 5.0)
    assert read_exit(paths) == 0 and read_result(paths).status is TaskStatus.COMPLETED  # type: ignore[union-attr]


def test_an_exit_before_any_claim_is_still_recorded(tmp_path: Path) -> None:
    from tether.execution.protocol import abandon, read_exit, write_exit

    paths = ExecutionPaths(tmp_path)
    write_exit(paths, 3, pid=333)  # a worker that died before it claimed (an unreadable request)
    assert read_exit(paths) == 3 and paths.exit.exists()
    assert abandon(paths, "no worker began").abandoned == "no worker began"  # the claim is still free


def test_a_claim_written_by_an_older_tether_is_honoured(tmp_path: Path) -> None:
    from tether.execution.protocol import claim_for_worker, read_claim

    paths = ExecutionPaths(tmp_path)
    paths.legacy_claim.write_text(json.dumps({"protocol": 2, "pid": 44, "create_time": 1.5, "at": 0.0}))
    claim = read_claim(paths)
    assert claim is not None and claim.pid == 44
    assert not claim_for_worker(paths, 45, 2.0)


def test_an_empty_log_goes_only_once_nothing_of_the_worker_can_write_to_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.support.helpers import exited, wait_for
    from tether.execution.protocol import claim_for_worker, write_exit

    paths = ExecutionPaths(tmp_path)
    paths.log.touch()
    # A worker's group outlives it while something it started runs (a game it left on purpose).
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert claim_for_worker(paths, child.pid, 1.0)
        write_exit(paths, 0, pid=child.pid)
        assert paths.log.exists()
    finally:
        child.kill()
        child.wait()
    wait_for(lambda: exited(child.pid), what="the group to end")
    write_exit(paths, 0, pid=child.pid)
    assert not paths.log.exists()
    paths.log.write_text("something the worker said\n")
    write_exit(paths, 0, pid=child.pid)
    assert paths.log.read_text() == "something the worker said\n"
