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
    write_result,
)
from tether.tasks.result import TaskResult, TaskStatus


def result(status: TaskStatus, message: str = "") -> TaskResult:
    return TaskResult(task_id="t.x", execution_id="e1", status=status, message=message)


def test_result_file_carries_the_protocol_version(tmp_path: Path) -> None:
    paths = ExecutionPaths(tmp_path)
    write_result(paths, result(TaskStatus.RUNNING))
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
    write_result(paths, result(TaskStatus.RUNNING, "x" * 50_000))
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            write_result(paths, result(TaskStatus.RUNNING, str(n) * 50_000))
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
