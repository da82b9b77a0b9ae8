"""Following a process run: from the spawn to the worker's terminal state (or, in the background, its
handshake).

The follower waits on the execution's doorbell and on a pidfd of the worker (``Wake``), with a short
timeout that keeps the deadlines honest; where nothing rings, it polls with a growing delay. On each wake
it reads ``result.json`` only when the file changed (inode, mtime and size: ``os.replace`` makes a new
inode each time), and the worker's liveness (pid and start time). The worker's claim decides which
process it follows: a retried spawn may have forked two, and only one claimed the execution. A terminal
publication is put on record, with the worker that reached it, before it is returned. A worker that dies
is settled from its files and exit code; one that misses its start handshake is killed and answered
``failed``; one that runs past its timeout is stopped by the job manager.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

from tether.config import Settings
from tether.execution import faults, process
from tether.execution.jobs import POLL_S, JobManager
from tether.execution.protocol import TIMEOUT, Claim, ExecutionPaths, current_record
from tether.execution.records import RecordWriter, off_loop
from tether.execution.wake import Wake
from tether.store.jobs import JobStore
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import TaskSpec

MAX_POLL_S = 0.02
LIVENESS_POLL_S = 0.02  # with a doorbell, how often deadlines (and a silent worker) are checked


@dataclass(slots=True, kw_only=True)
class Follow:
    """Follows one worker of one execution; ``run()`` once."""

    settings: Settings
    jobs: JobManager
    store: JobStore
    records: RecordWriter
    spec: TaskSpec
    paths: ExecutionPaths
    ref: process.ProcessRef  # the worker followed: the spawned one until another claims the execution
    wake: Wake
    # Set by the "running" handshake (inf when the task has no timeout); until then the handshake's own.
    run_deadline: float | None = field(default=None, init=False)
    _handshake_deadline: float = field(default=0.0, init=False)
    _claimed: bool = field(default=False, init=False)
    _last_seen: tuple[int, int, int] | None = field(default=None, init=False)
    _delay: float = field(default=0.0005, init=False)

    @property
    def execution_id(self) -> str:
        return self.paths.dir.name

    async def run(self) -> TaskResult:
        self.wake.watch_exit(self.ref)
        rings = self.paths.doorbell.exists()  # else nothing rings when the worker publishes: poll
        self._handshake_deadline = time.monotonic() + self.settings.handshake_timeout_s
        while True:
            answer = await self._look()
            if answer is not None:
                return answer
            faults.point("executor.before_liveness")
            if not process.is_alive(self.ref):
                answer = await self._exited()
                if answer is None:
                    continue  # the worker that claimed the execution is the one to follow
                return answer
            now = time.monotonic()
            if self.run_deadline is None and now > self._handshake_deadline:
                return await self._handshake_missed()
            if self.run_deadline is not None and now > self.run_deadline:
                return await self._timed_out()
            if rings:
                # Woken the moment the worker publishes or exits; the timeout keeps watching deadlines.
                await self.wake.wait(LIVENESS_POLL_S)
            else:
                await self.wake.wait(self._delay)
                self._delay = min(self._delay * 1.5, MAX_POLL_S if self.run_deadline is None else POLL_S * 2)

    def _adopt_claim(self, claim: Claim | None) -> None:
        """The claim names the worker that really runs the execution (a retried spawn may have forked
        two; only one claimed it): follow that one."""
        if claim is None:
            return
        self._claimed = True
        if claim.pid != self.ref.pid and claim.worker:
            self._follow(claim)
            ref = self.ref
            self.records.later(
                self.execution_id, self.store.set_process, self.execution_id, ref.pid, ref.create_time
            )

    def _follow(self, claim: Claim) -> None:
        self.ref = process.ProcessRef(pid=claim.pid, create_time=claim.create_time)
        self.wake.watch_exit(self.ref)

    async def _look(self) -> TaskResult | None:
        """Read a changed ``result.json``: the answer when it is terminal, or a background task's
        handshake; a foreground handshake starts the run's deadline."""
        try:
            stat = os.stat(self.paths.result)
            # os.replace makes a new inode each time: two writes within one mtime tick still differ.
            seen: tuple[int, int, int] | None = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            seen = None
        if seen == self._last_seen:
            return None
        self._last_seen = seen
        record = current_record(self.paths)
        if record is not None and not self._claimed:
            self._adopt_claim(record.claim)
        published = None if record is None else record.result
        if published is not None and published.status.terminal:
            await self.records.final(published, self.ref)
            return published
        if published is None or published.status is not TaskStatus.RUNNING or self.run_deadline is not None:
            return None
        ref, spec = self.ref, self.spec
        if spec.background:  # the caller returns now: "running" must be on record first
            await self.records.now(self.store.transition, published, process=(ref.pid, ref.create_time))
            if process.is_alive(ref):
                return published.with_data(pid=ref.pid, background=True)
        else:
            self.records.later(self.execution_id, self.store.transition, published, defer=True)
            if spec.timeout_s is not None:
                self.run_deadline = time.monotonic() + spec.timeout_s
        if self.run_deadline is None:
            self.run_deadline = float("inf")
        return None

    async def _exited(self) -> TaskResult | None:
        """The followed worker is gone: its answer, or None when another worker claimed the execution."""
        found = current_record(self.paths)
        claim = None if found is None else found.claim
        if claim is not None and claim.worker and claim.pid != self.ref.pid:
            self._follow(claim)
            return None
        # It may have published and exited between the look above and this one.
        published = None if found is None else found.result
        if published is not None and published.status.terminal:
            await self.records.final(published, self.ref)
            return published  # the same answer as when the publication is seen first
        await self.jobs.await_exit_code(self.paths, self.wake)
        record = await off_loop(self.jobs.reconcile, self.execution_id)
        return await off_loop(self.jobs.describe, record)

    async def _handshake_missed(self) -> TaskResult:
        """No ``running`` in time: the worker is killed, and the run failed."""
        ref = self.ref
        await asyncio.to_thread(process.kill_tree, ref)
        await _until_dead(ref, self.settings.stop_grace_kill_s)
        record = await off_loop(self.jobs.record, self.execution_id)
        limit = self.settings.handshake_timeout_s
        why = f"the worker did not complete its start handshake within {limit:g}s and was killed"
        data = {"pid": ref.pid, "handshake_timeout_s": limit}
        finished = await off_loop(self.jobs.finish, record, self.paths, TaskStatus.FAILED, why, data)
        return finished.to_result()

    async def _timed_out(self) -> TaskResult:
        result = await self.jobs.stop(self.execution_id, reason=TIMEOUT)
        if result.status is TaskStatus.COMPLETED:
            return result
        message = f"timed out after {self.spec.timeout_s:g}s; {result.message}"
        return result.model_copy(update={"message": message})


async def _until_dead(ref: process.ProcessRef, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    # Another process's state: there is nothing to await, so it is polled with a deadline.
    while process.is_alive(ref) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(POLL_S)
