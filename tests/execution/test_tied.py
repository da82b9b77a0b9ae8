"""A holder's detached job on a resource it holds for the installation dies with the holder.

The review of the several-hosts work found it: a detached job outlives its starter by design, but on a
resource a worker holds for the whole installation that meant a job left driving the arm after its
worker crashed — while the worker of another host, finding the hold lapsed, took the arm and started its
own work on it. Now such a job watches its executor as a non-detached one does, and stops when it dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, tether_cli, wait_for

pytestmark = pytest.mark.timeout(120)

HOLDER = """
import asyncio, os, sys
from tether.execution.executor import Executor
from tether.runtime import Runtime
from tether.store.workers import WorkerStore
from tests.support.flowkit import flows

async def main() -> None:
    with Runtime.open() as rt:
        WorkerStore(rt.db).join(
            "holder/x/slot-0", machine="m", home=str(rt.home), pid=os.getpid(), resources=["arm"],
            version="v", lease_s=600,
        )
        with Executor(flows, runtime=rt) as executor:
            executor.placement.holds = lambda resource: True  # as a launched worker that holds the arm
            await executor.execute(
                "f.arm", {"key": "k", "until_file": "never"}, caller="cli", detach=True,
                on_start=lambda execution_id: print(execution_id, flush=True),
            )

asyncio.run(main())
"""


def _status(home: Path, execution_id: str) -> str:
    code, out, err = tether_cli("--registry", "tests.support.flowkit:flows", "job", "status", execution_id,
                                "--json", home=home)  # fmt: skip
    assert code in (0, 1), err
    return str(json.loads(out)["status"])


def test_a_detached_job_on_a_held_resource_stops_when_its_holder_dies(home: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER], cwd=ROOT, stdout=subprocess.PIPE,
        text=True, env={**os.environ, "TETHER_HOME": str(home), "TETHER_PARENT_POLL_S": "0.1"},
    ) as holder:  # fmt: skip
        assert holder.stdout is not None
        execution_id = holder.stdout.readline().strip()
        wait_for(lambda: _status(home, execution_id) == "running", timeout=60, what="the job running")
        os.kill(holder.pid, signal.SIGKILL)  # the worker crashed: its hold on the arm lapses
        holder.wait(30)
    wait_for(lambda: _status(home, execution_id) == "stopped", timeout=60, what="the job stopped with it")
