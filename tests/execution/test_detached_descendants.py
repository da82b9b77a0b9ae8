"""Any task's detached descendants and the job's stop (the shell toolkit contains its own commands;
this is every other handler that starts a process)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from tests.execution.test_process_tree import tagged
from tests.support.figures import count
from tests.support.helpers import wait_for
from tether.execution.executor import Executor
from tether.tasks.context import TaskContext
from tether.tasks.result import TaskStatus
from tether.tasks.spec import CLI, Registry, TaskSpec

# fork, setsid, fork: a grandchild in a session of its own whose parent has exited (argv[0] is the tag)
DETACH = """
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", [sys.argv[1], "60"])
    os._exit(0)
os.wait()
"""


class Tagged(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tag: str


def detaches(ctx: TaskContext) -> str:
    params = ctx.params
    assert isinstance(params, Tagged)
    subprocess.run([sys.executable, "-c", DETACH, params.tag], check=True)
    ctx.progress(None, "detached")
    ctx.sleep(60)
    ctx.check_stop()
    return "slept"


def detaches_then_fails(ctx: TaskContext) -> str:
    params = ctx.params
    assert isinstance(params, Tagged)
    subprocess.run([sys.executable, "-c", DETACH, params.tag], check=True)
    raise RuntimeError("broke after starting a helper")


def detaches_and_completes(ctx: TaskContext) -> str:
    params = ctx.params
    assert isinstance(params, Tagged)
    subprocess.run([sys.executable, "-c", DETACH, params.tag], check=True)
    return "started a daemon on purpose"


registry = Registry(ref=f"{__name__}:registry")
for name, handler in (
    ("t.detaches_then_fails", "detaches_then_fails"),
    ("t.detaches_ok", "detaches_and_completes"),
):
    registry.add(
        TaskSpec(
            task_id=name,
            handler=f"{__name__}:{handler}",
            params=Tagged,
            exposed_to=frozenset({CLI}),
            resources=(),
        )
    )
registry.add(
    TaskSpec(
        task_id="t.detaches",
        handler=f"{__name__}:detaches",
        params=Tagged,
        background=True,
        exposed_to=frozenset({CLI}),
        resources=(),
    )
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/bin/sleep and /proc")
def test_a_stop_ends_a_handlers_detached_grandchild(
    make_executor: Callable[..., Executor], home: Path
) -> None:
    count("process escapes tried")
    executor = make_executor(registry)
    tag = f"tether-test-{uuid.uuid4().hex}"
    try:
        started = asyncio.run(executor.execute("t.detaches", {"tag": tag}, caller="cli", detach=True))
        assert started.status is TaskStatus.RUNNING, started
        wait_for(lambda: tagged(tag), what="the detached grandchild")
        stopped = asyncio.run(executor.control(started.execution_id, "stop", caller="cli"))
        assert stopped.status is TaskStatus.STOPPED, stopped
        wait_for(lambda: not tagged(tag), timeout=5, what="the detached grandchild to end with the job")
    finally:
        for pid in tagged(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/bin/sleep and /proc")
def test_what_a_failed_task_started_ends_with_it_and_a_completed_one_may_leave_a_daemon(
    make_executor: Callable[..., Executor],
) -> None:
    executor = make_executor(registry)
    failed, kept = f"tether-test-{uuid.uuid4().hex}", f"tether-test-{uuid.uuid4().hex}"
    try:
        result = executor.execute_sync("t.detaches_then_fails", {"tag": failed}, caller="cli")
        assert result.status is TaskStatus.FAILED and result.data.get("ended_processes") == 1, result
        assert not tagged(failed)  # ended before the failure was published
        result = executor.execute_sync("t.detaches_ok", {"tag": kept}, caller="cli")
        assert result.status is TaskStatus.COMPLETED
        assert tagged(kept)  # a completed task's daemon lives on (demo.start_game leaves its game)
    finally:
        for pid in tagged(failed) + tagged(kept):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
