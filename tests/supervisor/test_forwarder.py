"""A forwarded call whose resource has lost every owner ends, instead of waiting forever.

The review of the several-hosts work found it: a call forwarded to a resource's queue waited for its
workflow's result for as long as its caller lived. When every worker that owned the resource died or
left, with no peer of their version to take the call over, the caller hung — and a worker started days
later would have run the call behind everyone's back. Now, once no live worker of the version has owned
the resource for a lease, the workflow is cancelled and the call ends as what can be known of it.

Real PostgreSQL and DBOS's client; the owner is a registry row, so that no worker process ever takes the
call (nothing listens to the resource's queue)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import pg_home
from tether.execution.placement import Forwarded
from tether.runtime import Runtime
from tether.store.workers import WorkerStore
from tether.supervisor import cluster, durable
from tether.tasks.result import TaskStatus

pytestmark = pytest.mark.timeout(120)
LEASE = "[cluster]\nheartbeat_s = 0.2\nlease_s = 2\n"


def _owner(runtime: Runtime, version: str) -> WorkerStore:
    peers = WorkerStore(runtime.db, runtime.cluster_settings.lease_s)
    peers.join(
        "owner/x/slot-0", machine="elsewhere", home="/elsewhere", pid=1, resources=["arm"],
        version=version, lease_s=runtime.cluster_settings.lease_s,
    )  # fmt: skip
    return peers


def _requests(runtime: Runtime, execution_id: str) -> int:
    from sqlalchemy import text

    with runtime.db.read() as conn:
        query = text("SELECT count(*) FROM job_requests WHERE execution_id = :e")
        return int(conn.execute(query, {"e": execution_id}).scalar_one())


def _status(runtime: Runtime, workflow_id: str) -> str | None:
    with durable.client(runtime) as c:
        return durable.outcome(c, workflow_id)[0]


def test_a_call_whose_owners_all_left_ends_and_never_runs_later(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pg_home(home, LEASE) as env:
        monkeypatch.setenv("TETHER_API_KEY_DATABASE", env["TETHER_API_KEY_DATABASE"])
        with Runtime.open(home) as runtime:
            forwarder = cluster.DbosForwarder(runtime)
            peers = _owner(runtime, forwarder.version)
            call = Forwarded(task_id="arm.move", params={}, caller="cli", execution_id="e-stranded-1")

            async def follow() -> object:
                task = asyncio.create_task(forwarder(call, "arm", None))
                remote = cluster.remote_id(call.execution_id)
                for _ in range(600):  # handed over: waiting for its owner
                    if _status(runtime, remote) == "ENQUEUED":
                        break
                    await asyncio.sleep(0.05)
                # While its owner beats, the call waits for it, leases on end.
                until = asyncio.get_running_loop().time() + 2.5
                while asyncio.get_running_loop().time() < until:
                    peers.beat("owner/x/slot-0", forwarder.version, ["arm"], 2.0)
                    await asyncio.sleep(0.2)
                    assert not task.done()
                peers.leave("owner/x/slot-0", forwarder.version)  # and now it is gone, with no peer
                return await asyncio.wait_for(task, 30)

            result = asyncio.run(follow())
            assert result.status is TaskStatus.FAILED  # type: ignore[attr-defined]
            assert "no worker of this version owns arm any more" in result.message  # type: ignore[attr-defined]
            assert result.data == {"never_started": True}  # type: ignore[attr-defined]
            assert _requests(runtime, call.execution_id) == 0  # its caller's beats are not left behind
            # Cancelled: a worker that owns arm later does not run it.
            assert _status(runtime, cluster.remote_id(call.execution_id)) == "CANCELLED"
            # Retention takes ended calls' workflows out of DBOS's log with the runs'.
            durable.prune(runtime, older_than_days=1e-9)
            assert _status(runtime, cluster.remote_id(call.execution_id)) is None


def test_the_fence_counts_the_time_a_host_slept() -> None:
    """A laptop or VM suspended past its lease must fence itself on waking, before it takes work on
    resources another worker holds by then. The monotonic clock stops during a suspend (it would say the
    last heartbeat landed a beat ago); the heartbeat's clock is the boot-time one, which goes on. (A real
    suspend cannot be done in the suite: this pins the clock.)"""
    import sys
    import time

    if sys.platform == "linux":
        assert cluster._AWAKE == time.CLOCK_BOOTTIME
        assert abs(cluster.awake() - time.clock_gettime(time.CLOCK_BOOTTIME)) < 1
