"""A stop of a task that runs inside the executor's process (``isolation="inline"``) tells the truth.

Stopping ``web.search`` recorded "stopped before it started" after 15 s while the handler ran on and its
caller was told ``completed``. An inline task is either stopped for real (its handler looks for the
stop) or the stop says it cannot be stopped and the task ends within its timeout; the record and the
caller's answer are always the same thing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from tests.support.helpers import tether_cli, wait_for
from tether.execution.executor import Executor
from tether.tasks.result import TaskResult, TaskStatus

SUPPORT = ("--registry", "tests.support.registry:registry")


def _start(executor: Executor, task_id: str, execution_id: str) -> tuple[threading.Thread, list[TaskResult]]:
    answers: list[TaskResult] = []

    def call() -> None:
        answers.append(asyncio.run(executor.execute(task_id, caller="agent", execution_id=execution_id)))

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    return caller, answers


def test_a_cooperative_inline_task_is_stopped_for_real(support: Executor, home: Path) -> None:
    execution_id = "1a2400000000000aaaa"
    caller, answers = _start(support, "t.inline_waits", execution_id)
    wait_for((home / "inline-started").exists, what="the inline task to start")
    assert support.store.get(execution_id).status is TaskStatus.RUNNING  # type: ignore[union-attr]
    _, out, err = tether_cli(*SUPPORT, "job", "stop", execution_id, "--json", home=home)  # another process
    caller.join(timeout=60)
    (answer,) = answers
    record = support.store.get(execution_id)
    assert record is not None
    assert answer.status is TaskStatus.STOPPED and record.status is TaskStatus.STOPPED, (answer, out, err)


def test_an_inline_task_that_cannot_be_stopped_says_so_and_its_record_is_its_answer(
    support: Executor, home: Path
) -> None:
    execution_id = "1a2400000000000bbbb"
    caller, answers = _start(support, "t.inline_busy", execution_id)
    wait_for((home / "inline-started").exists, what="the inline task to start")
    _, out, _ = tether_cli(*SUPPORT, "job", "stop", execution_id, "--json", home=home)
    said: dict[str, Any] = __import__("json").loads(out)
    assert said["status"] == "running" and said["data"].get("stop_refused"), said
    assert "cannot be stopped" in said["message"] and "60" in said["message"]
    (home / "inline-go").touch()
    caller.join(timeout=60)
    (answer,) = answers
    record = support.store.get(execution_id)
    assert record is not None
    assert answer.status is record.status is TaskStatus.COMPLETED, (answer, record)


def test_an_inline_task_whose_process_died_is_not_running_forever(support: Executor, home: Path) -> None:
    """The record names the process the task runs in: when it is gone, so is the task."""
    import subprocess
    import sys

    script = (
        "import asyncio, os, sys\n"
        "from tests.support.registry import registry\n"
        "from tether.execution.executor import Executor\n"
        "from tests.support.helpers import FAST\n"
        "ex = Executor(registry, home=sys.argv[1], settings=FAST)\n"
        "asyncio.run(ex.execute('t.inline_busy', caller='agent', execution_id='1a2400000000000cccc'))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(home)])
    try:
        wait_for((home / "inline-started").exists, what="the inline task to start")
    finally:
        proc.kill()
        proc.wait(timeout=30)
    record = support.jobs.reconcile("1a2400000000000cccc")
    assert record.status is TaskStatus.FAILED and "exited" in record.message, record
