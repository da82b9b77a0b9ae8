"""An agent's grants at the trust boundary: admission, the worker's own check, and the jobs it sees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import ROOT
from tether.execution.executor import Executor
from tether.execution.protocol import (
    ExecutionPaths,
    Request,
    read_request,
    read_result,
    request_key,
    sign,
    write_request,
)
from tether.tasks.grants import Grants
from tether.tasks.result import TaskStatus

SUPPORT = "tests.support.registry:registry"


def test_a_task_outside_the_grants_is_not_found_like_one_that_does_not_exist(support: Executor) -> None:
    grants = Grants.of(["t.echo*"])
    outside = support.execute_sync("t.quick", caller="agent", grants=grants)
    missing = support.execute_sync("t.no_such_task", caller="agent", grants=grants)
    assert outside.status is missing.status is TaskStatus.NOT_FOUND
    assert outside.message == "no task 't.quick' is available to agent"
    inside = support.execute_sync("t.quick", caller="agent", grants=Grants.of(["t.*"]))
    assert inside.status is TaskStatus.COMPLETED
    # The grants travel in the signed request, for the worker to check again.
    request = read_request(ExecutionPaths.of(support.home, inside.execution_id))
    assert request.grants == [["t.*"]]


def test_the_worker_checks_the_grants_of_its_request(support: Executor, home: Path) -> None:
    support.execute_sync("t.quick", caller="agent")  # makes the home's request key
    request = Request(
        execution_id="granted-by-hand",
        task_id="t.quick",
        registry_ref=SUPPORT,
        caller="agent",
        grants=[["t.echo*"]],
        params={},
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
    paths = ExecutionPaths.of(home, request.execution_id)
    write_request(paths, sign(request, key))
    subprocess.run(
        [sys.executable, "-m", "tether.execution.worker", str(paths.dir)], cwd=ROOT, timeout=60, check=True
    )
    result = read_result(paths)
    assert result is not None and result.status is TaskStatus.NOT_FOUND


def test_jobs_outside_the_grants_are_invisible_to_that_agent(support: Executor) -> None:
    import asyncio

    done = support.execute_sync("t.quick", caller="agent")
    narrow = Grants.of(["t.echo*"])
    seen = asyncio.run(support.control(done.execution_id, "status", caller="agent", grants=narrow))
    assert seen is not None and seen.status is TaskStatus.NOT_FOUND
    assert all(r.task_id != "t.quick" for r in support.jobs_for("agent", grants=narrow))
    again = asyncio.run(
        support.control(done.execution_id, "status", caller="agent", grants=Grants.of(["t.*"]))
    )
    assert again.status is TaskStatus.COMPLETED
    # A prefix of its id finds nothing either.
    prefix = asyncio.run(support.control(done.execution_id[:8], "status", caller="agent", grants=narrow))
    assert prefix.status is TaskStatus.NOT_FOUND
