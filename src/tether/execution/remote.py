"""Jobs of the installation's other nodes (``store/workers.py``): a job's worker, files and signals are
in its node's home only, so from here a stop is asked through the database and applied by that node's
executor, and a job whose node was lost is settled as what it is — an outcome nobody can know."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from tether.store.database import Installation
from tether.store.jobs import JobRecord, JobStore
from tether.store.workers import WorkerStore
from tether.tasks.result import TaskResult, TaskStatus


class JobManager(Protocol):
    """What these need of ``execution.jobs.JobManager``."""

    peers: WorkerStore | None
    installation: Installation
    settings: Any
    store: JobStore

    def reconcile(self, execution_id: str) -> JobRecord: ...
    def describe(self, record: JobRecord) -> TaskResult: ...


REMOTE_POLL_S = 0.1
REMOTE_STOP_SLACK_S = 5.0  # beyond the escalation's graces: the other node's look for requests, its writes


def settle_if_lost(jobs: JobManager, record: JobRecord) -> JobRecord:
    """Another node's job: as on record, unless that node was lost (silent past its lease, its work
    taken over): then nobody will ever settle it there, and whether it finished cannot be known."""
    if jobs.peers is None or not jobs.installation.owns(record.installation) or not record.host:
        return record
    lost = jobs.peers.node_lost(record.host)
    # Only a job its lost executor started and waited on: it dies with its starter (it watches it). One
    # started by a command on that node, or detached, may run on: nothing can be said of it from here.
    if lost is None or record.detached or record.starter_pid not in lost[1]:
        return record
    silent = lost[0]
    message = (
        f"its node {record.host} was lost (silent {silent:.0f} s) while it ran: whether it finished "
        "is unknown"
    )
    result = jobs.describe(record).model_copy(update={"status": TaskStatus.FAILED, "message": message})
    return jobs.store.transition(result.with_data(interrupted=True, node_lost=record.host))


async def stop_elsewhere(jobs: JobManager, record: JobRecord, reason: str) -> TaskResult:
    """Stop another node's job: asked through the database, applied by that node's executor with the
    usual escalation. Waits for the outcome as long as the escalation may take."""
    assert jobs.peers is not None
    await asyncio.to_thread(jobs.peers.request_stop, record.execution_id, reason, jobs.installation.host)
    if not await asyncio.to_thread(jobs.peers.node_alive, record.host or ""):
        return await _requested(jobs, record, f"its node {record.host} has no live executor now: the stop "
                                "is applied when one starts there")  # fmt: skip
    s = jobs.settings
    within = s.stop_grace_cooperative_s + s.stop_grace_interrupt_s + s.stop_grace_kill_s + REMOTE_STOP_SLACK_S
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        record = await asyncio.to_thread(jobs.reconcile, record.execution_id)
        if record.terminal:
            return (await asyncio.to_thread(jobs.describe, record)).with_data(
                stop_step="remote", node=record.host
            )
        await asyncio.sleep(REMOTE_POLL_S)
    return await _requested(jobs, record, f"its node {record.host} has not applied it within {within:g} s")


async def _requested(jobs: JobManager, record: JobRecord, how: str) -> TaskResult:
    described = await asyncio.to_thread(jobs.describe, record)
    return described.model_copy(update={"message": f"stop requested; {how}"}).with_data(
        stop_requested=True, node=record.host
    )


def published_tail(peers: WorkerStore, execution_id: str, lines: int) -> str:
    """The last ``lines`` of another node's job's log, as that node last published them (every few
    heartbeats while it runs, once more as it ends; "" before it published any)."""
    text, _ = peers.tail(execution_id)
    if not text:
        return ""
    return "\n".join(text.splitlines()[-lines:]) + "\n"
