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


def test_status_and_stop_are_registry_tasks_under_the_same_grants(support: Executor) -> None:
    """``jobs.status`` and ``jobs.stop`` are tasks of every registry: listed, granted, their arguments
    checked, answered by the executor within the caller's view of jobs, and no job of their own."""
    assert {"jobs.status", "jobs.stop"} <= {s.task_id for s in support.registry.for_caller("agent")}
    done = support.execute_sync("t.quick", caller="agent")
    status = support.execute_sync("jobs.status", {"execution_id": done.execution_id}, caller="agent")
    assert status.status is TaskStatus.COMPLETED and status.execution_id == done.execution_id
    assert status.task_id == "t.quick"  # the job's own answer
    # Not granted: it does not exist for that agent, like any task outside its grants.
    narrow = Grants.of(["t.*"])
    refused = support.execute_sync(
        "jobs.status", {"execution_id": done.execution_id}, caller="agent", grants=narrow
    )
    assert (
        refused.status is TaskStatus.NOT_FOUND
        and refused.message == "no task 'jobs.status' is available to agent"
    )
    granted = Grants.of(["t.*", "jobs"])
    assert (
        support.execute_sync(
            "jobs.status", {"execution_id": done.execution_id}, caller="agent", grants=granted
        ).status
        is TaskStatus.COMPLETED
    )
    # A job outside the grants stays invisible through the task too.
    hidden = support.execute_sync(
        "jobs.stop", {"execution_id": done.execution_id}, caller="agent", grants=Grants.of(["jobs"])
    )
    assert hidden.status is TaskStatus.NOT_FOUND
    # Its arguments are checked like any task's, with the parameter named.
    bad = support.execute_sync("jobs.stop", {"id": "x"}, caller="agent")
    assert bad.status is TaskStatus.REJECTED and "execution_id" in bad.message
    # Only a job's owner scope: within an origin, another origin's job is not found.
    scoped = support.execute_sync(
        "jobs.status", {"execution_id": done.execution_id}, caller="agent", origin="thread:elsewhere"
    )
    assert scoped.status is TaskStatus.NOT_FOUND
    # Looking at a job is not work: no job records of its own.
    assert {r.task_id for r in support.jobs_for("agent")} == {"t.quick"}
    # A custom caller (a plan's profile) may look at the jobs it may see too.
    assert support.registry.get("jobs.stop", "writer") is not None
