"""An executor's part in an installation that spans several hosts (``store/workers.py``).

``Member`` is what a launched executor does besides running workflows, once per heartbeat:

- **says it is alive** and renews its hold on the resources it owns (the database's clock decides);
- **takes over** the executors of its version that fell silent for a lease: one claims each (a
  compare-and-set), then hands its pending workflows back to their queues (DBOS's recovery), where a
  live executor — the new holder, for a resource's queue — dequeues them. Their in-flight tool calls
  are settled like any crash: the published result adopted, or ``unknown`` (``execution/remote.py``);
- **applies** the stops other nodes asked for this node's jobs, and **publishes** the tails of its
  running jobs' logs, which only this node can read;
- **fences itself**: an executor that could not renew its heartbeat for ``FENCE`` of a lease stops
  dequeuing at once (``may_take``), stops the jobs that hold its resources and exits, before any other
  executor can find it silent and take its work and resources over. It never runs beside its successor.

On SQLite (one host) a dead executor's slot lock tells at once that it is dead (``durable``), so the
heartbeat only keeps the registry and the holds; nothing is claimed or fenced on a busy file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from tether.errors import StoreError
from tether.execution import process
from tether.execution.executor import Executor
from tether.execution.lock import holder
from tether.execution.placement import Forwarded
from tether.execution.protocol import ExecutionPaths, log_tail, request_stop
from tether.runtime import Runtime
from tether.store.workers import WorkerStore, live_owners
from tether.supervisor import durable
from tether.tasks.result import TaskResult, TaskStatus

log = logging.getLogger("tether.cluster")

STOP_TAKING = 0.4  # of a lease without a renewal: no new work is dequeued from a resource's queue
FENCE = 0.5  # of a lease without a renewal: the executor stops its resources' jobs and exits
FENCE_EXIT_CODE = 75  # EX_TEMPFAIL: a service manager restarts it, and it joins again
TAIL_EVERY = 2  # heartbeats between publications of running jobs' log tails
TAIL_LINES = 40


def awake() -> float:
    """A clock that goes on while the machine sleeps (Linux's boot time; elsewhere the monotonic one).
    A host suspended past its lease finds, on waking, that its heartbeat is that old, and fences itself
    before it starts anything; the monotonic clock stops during a suspend, and would say a beat ago."""
    return time.clock_gettime(_AWAKE)


_AWAKE = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


class Member:
    """This executor in its installation's registry (``join`` before DBOS launches)."""

    def __init__(
        self,
        runtime: Runtime,
        executor: Executor,
        executor_id: str,
        resources: tuple[str, ...],
        version: str,
        *,
        exit_on_fence: Callable[[], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.executor = executor
        self.executor_id = executor_id
        self.resources = tuple(sorted(set(resources)))
        self.version = version
        self.peers = WorkerStore(runtime.db, runtime.cluster_settings.lease_s)
        settings = runtime.cluster_settings
        self.beat_s, self.lease_s = settings.heartbeat_s, settings.lease_s
        self.shared = runtime.db.dialect == "postgresql"  # several hosts can only meet on PostgreSQL
        self.held: frozenset[str] = frozenset()
        self.renewed_at = awake()  # when the last heartbeat that landed was sent
        self.fenced = False
        self.draining = False
        self.launched = False  # DBOS runs here: it may take other executors' work over
        self._exit = exit_on_fence or _exit_now
        self._stopping: set[str] = set()
        self._tails: dict[str, int] = {}
        self._beats = 0
        self._stop_watch = threading.Event()
        self.incarnation: float | None = None  # ``join``'s: the heartbeats of this process only

    def join(self) -> None:
        # On PostgreSQL, a fresh row of this executor id, machine and home is its dead predecessor's or a
        # cloned host's: two heartbeats of looking tell which (only a live one's row moves).
        watch_s = 2 * self.beat_s + 0.1 if self.shared else 0.0
        self.incarnation = self.peers.join(
            self.executor_id, machine=socket.gethostname(), home=str(self.runtime.home), pid=os.getpid(),
            resources=self.resources, version=self.version, lease_s=self.lease_s, watch_s=watch_s,
        )  # fmt: skip
        self.beat()

    def beat(self) -> bool:
        """One heartbeat; False when the installation found this executor silent and took over, or
        another process joined under its id."""
        sent = awake()
        alive, held = self.peers.beat(
            self.executor_id, self.version, self.resources, self.lease_s, self.incarnation
        )
        if alive:
            self.held, self.renewed_at = frozenset(held), sent
        return alive

    def silent_for(self) -> float:
        return awake() - self.renewed_at

    def may_take(self, resource: str) -> bool:
        """Whether this executor may start work on ``resource`` now (the idle gate asks before each
        poll of its queue): it holds it, and its hold is surely not expired anywhere."""
        return self.taking() and resource in self.held and self.silent_for() < STOP_TAKING * self.lease_s

    def quitting(self) -> bool:
        """Whether this executor is on its way out (its workflows are about to be taken over)."""
        return self.draining or self.fenced

    def quiet(self) -> None:
        """This executor stops on purpose: the fence's watchdog stands down."""
        self.draining = True
        self._stop_watch.set()

    def taking(self) -> bool:
        """Whether this executor takes new work at all (not once it drains or fenced itself)."""
        return not (self.fenced or self.draining)

    async def depart(self) -> None:
        """Before this executor stops: take no new work, let the tool calls it started finish for
        ``[cluster] drain_s``, then stop the rest with the usual escalation — each ends on record, so
        whoever takes its workflows over finds their outcomes instead of waiting for this node."""
        self.draining = True
        mine = os.getpid()

        def running() -> list[str]:
            jobs = self.runtime.jobs.list(active=True, limit=1000, here=True)
            owned = set(self.resources)  # any job on them, detached too: its hold is about to go
            return [j.execution_id for j in jobs
                    if (j.starter_pid == mine and not j.detached) or owned & set(j.resources)]  # fmt: skip

        deadline = time.monotonic() + self.runtime.cluster_settings.drain_s
        left = await asyncio.to_thread(running)
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            left = await asyncio.to_thread(running)
        if left:
            log.warning("stopping %d tool call(s) still running as this worker stops", len(left))
            reason = "its worker stopped"
            await asyncio.gather(
                *(self.executor.jobs.stop(e, reason=reason) for e in left), return_exceptions=True
            )

    def leave(self) -> None:
        with contextlib.suppress(StoreError):
            self.peers.leave(self.executor_id, self.version)

    # -- the loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Heartbeats and chores, until cancelled. Neither ever waits on the other: a database that
        stops answering leaves a heartbeat or a chore hanging in its thread, and the watchdog fences."""
        watchdog = threading.Thread(target=self._watch, name="tether-fence", daemon=True)
        watchdog.start()
        beat: asyncio.Future[bool] | None = None
        chores: asyncio.Future[None] | None = None
        try:
            while True:
                if beat is None or beat.done():
                    if _outcome(beat) is False:
                        self.fence(
                            "the installation found this executor silent and took its work over, "
                            "or another process joined under its id"
                        )
                        return
                    beat = asyncio.ensure_future(asyncio.to_thread(self.beat))
                answering = self.renewed_at >= awake() - self.beat_s * 1.5
                if answering and (chores is None or chores.done()):
                    chores = asyncio.ensure_future(self._chores())
                await asyncio.sleep(self.beat_s)
        finally:
            self._stop_watch.set()

    def _watch(self) -> None:
        """Fence this executor once no heartbeat has landed for ``FENCE`` of a lease (on PostgreSQL,
        where other hosts would take over): from a thread of its own, so a stuck event loop, or a
        heartbeat hanging on a dead connection, cannot keep it from happening."""
        while not self._stop_watch.wait(min(self.beat_s, 0.1)):
            if self.shared and not self.fenced and self.silent_for() >= FENCE * self.lease_s:
                self.fence(f"no heartbeat reached the database for {self.silent_for():.1f} s")
                return

    async def _chores(self) -> None:
        self._beats += 1
        try:
            if self.shared:
                await self._take_over()
            # A forwarded call whose caller stopped waiting for it (killed, crashed) stops, as a job whose
            # starter died does on one host: asked like any stop, applied just below.
            for execution_id, silent in await asyncio.to_thread(self.peers.unfollowed, self.lease_s):
                why = f"its caller on another node stopped waiting for it ({silent:.0f} s ago)"
                await asyncio.to_thread(
                    self.peers.request_stop, execution_id, why, self.runtime.installation.host
                )
            for execution_id, reason in await asyncio.to_thread(self.peers.stops_here):
                if execution_id not in self._stopping:
                    self._stopping.add(execution_id)
                    asyncio.get_running_loop().create_task(self._stop(execution_id, reason))
            if self._beats % TAIL_EVERY == 0:
                await asyncio.to_thread(self._publish_tails)
        except StoreError as exc:
            log.warning("the cluster's chores failed this heartbeat: %s", exc.message)
        except Exception:  # DBOS's recovery, a job's stop: the next heartbeat tries again
            log.warning("the cluster's chores failed this heartbeat", exc_info=True)

    async def _take_over(self) -> None:
        if not self.launched:
            return
        lost = await asyncio.to_thread(self.peers.claim_lost, self.executor_id, self.lease_s, self.version)
        if not lost:
            return
        from dbos._recovery import recover_pending_workflows

        handles = await asyncio.to_thread(recover_pending_workflows, durable.instance(), lost)
        await asyncio.to_thread(self.peers.mark_recovered, lost, self.version)  # a failure before: again
        log.warning("took over %d workflow(s) of lost executor(s) %s", len(handles), ", ".join(lost))

    async def _stop(self, execution_id: str, reason: str) -> None:
        try:
            await self.executor.jobs.stop(execution_id, reason=f"{reason} (asked from another node)")
        except Exception:
            log.warning("a stop asked from another node failed for %s", execution_id, exc_info=True)
        finally:
            self._stopping.discard(execution_id)

    def _publish_tails(self) -> None:
        """The tails of this node's running jobs' logs, for readers on other nodes; and their records
        brought up to date (a job whose starter died is settled here, where its files are)."""
        seen = {r.execution_id for r in self.runtime.jobs.list(active=True, limit=200, here=True)}
        running = {e for e in seen if not self.executor.jobs.reconcile(e).terminal}
        for execution_id in seen | set(self._tails):  # one that ended since the last pass: its last tail
            paths = ExecutionPaths.of(self.runtime.home, execution_id)
            try:
                size = paths.log.stat().st_size
            except OSError:
                size = -1
            if size != self._tails.get(execution_id):
                self.peers.publish_tail(execution_id, log_tail(paths, TAIL_LINES))
                self._tails[execution_id] = size
            if execution_id not in running:
                self._tails.pop(execution_id, None)  # ended: its last tail is out

    # -- fencing ---------------------------------------------------------------------------------

    def fence(self, why: str) -> None:
        """Stop everything this executor holds and exit, without the database (it may be out of reach):
        the jobs holding its resources are asked to stop, interrupted, then killed with their trees."""
        self.fenced = True
        log.error(
            "fenced: %s; stopping the jobs on %s and exiting", why, ", ".join(self.resources) or "nothing"
        )
        refs = []
        for resource in self.resources:
            found = holder(self.runtime.home, [resource])
            if found is None:
                continue
            owner = found[1]
            with contextlib.suppress(Exception):
                request_stop(ExecutionPaths.of(self.runtime.home, str(owner["execution_id"])), why)
            refs.append(process.ProcessRef(pid=int(owner["pid"]), create_time=float(owner["create_time"])))
        for ref in refs:
            process.interrupt(ref)
        deadline = time.monotonic() + 0.5
        while any(process.is_alive(r) for r in refs) and time.monotonic() < deadline:
            time.sleep(0.02)
        for ref in refs:
            process.kill_tree(ref)
        self._exit()


def _outcome(beat: asyncio.Future[bool] | None) -> bool | None:
    if beat is None:
        return None
    try:
        return beat.result()
    except StoreError as exc:
        log.warning("a heartbeat did not reach the database: %s", exc.message)
        return None
    except Exception:
        log.warning("a heartbeat failed", exc_info=True)
        return None


def _exit_now() -> None:
    """Leave at once: no workflow of this process may take another step beside its successor."""
    logging.shutdown()
    os._exit(FENCE_EXIT_CODE)


# -- forwarding a call to the holder of its resource ---------------------------------------------


class DbosForwarder:
    """Hands admitted calls to their resource's queue (``durable.resource_queue``), where its holder
    runs them (``engine.remote_call``) under the caller's execution id, and follows them: the result,
    or a background job's handshake. A caller that gives up (cancelled) stops the job."""

    def __init__(self, runtime: Runtime, keep_on_cancel: Callable[[], bool] | None = None) -> None:
        self.runtime = runtime
        self.names = durable.names(runtime.installation.id)
        self.version = self.names.version
        # True while this process's workflows are about to be taken over (its executor drains or fenced
        # itself): a call cancelled then is not given up — whoever takes the workflow over follows it.
        self.keep_on_cancel = keep_on_cancel or (lambda: False)

    async def __call__(
        self, call: Forwarded, resource: str, on_start: Callable[[str], None] | None
    ) -> TaskResult:
        client = await asyncio.to_thread(durable.shared_client, self.runtime)  # kept by the process
        started = False
        look_at_owners = time.monotonic() + OWNERS_EVERY_S
        ownerless_since: float | None = None  # owners may be gone for a restart's while: a lease
        try:
            if not call.detach:
                await asyncio.to_thread(self._follow, call.execution_id)
            await asyncio.to_thread(self._enqueue, client, call, resource)
            while True:
                if not started and on_start is not None:
                    if await asyncio.to_thread(self.runtime.jobs.get, call.execution_id) is not None:
                        on_start(call.execution_id)
                        started = True
                done = await asyncio.to_thread(self._done, client, call)
                if done is None and time.monotonic() >= look_at_owners:
                    look_at_owners = time.monotonic() + OWNERS_EVERY_S
                    if not call.detach:  # its holder stops it once this caller is silent for a lease
                        await asyncio.to_thread(self._follow, call.execution_id)
                    if await asyncio.to_thread(self._owned, resource):
                        ownerless_since = None
                    elif ownerless_since is None:
                        ownerless_since = time.monotonic()
                    elif time.monotonic() - ownerless_since >= self.runtime.cluster_settings.lease_s:
                        done = await asyncio.to_thread(self._stranded, client, call, resource)
                if done is not None:
                    return done
                await asyncio.sleep(FOLLOW_S)
        except asyncio.CancelledError:
            if self.keep_on_cancel():
                raise
            peers = WorkerStore(self.runtime.db)
            with contextlib.suppress(StoreError):
                await asyncio.to_thread(
                    peers.request_stop, call.execution_id, "its caller gave up", call.from_node
                )
            with contextlib.suppress(Exception):
                await asyncio.to_thread(
                    durable.cancel_workflows, self.runtime, [remote_id(call.execution_id)]
                )
            raise

    def _enqueue(self, c: Any, call: Forwarded, resource: str) -> None:
        durable.prepare_resources(durable.system_url(self.runtime), self.names, (resource,))
        options = {
            "workflow_name": durable.REMOTE_CALL_WORKFLOW,
            "queue_name": durable.resource_queue(self.names, resource),
            "workflow_id": remote_id(call.execution_id),
            "app_version": self.version,
        }
        c.enqueue(options, call.to_json())

    def _done(self, c: Any, call: Forwarded) -> TaskResult | None:
        """The call's result once its workflow ended; for a background call, its job once running."""
        if call.detach:
            record = self.runtime.jobs.get(call.execution_id)
            if record is not None and (record.terminal or record.status is TaskStatus.RUNNING):
                return record.to_result()
        status, output = durable.outcome(c, remote_id(call.execution_id))
        if status == "SUCCESS" and isinstance(output, dict):
            return TaskResult.model_validate(output)
        if status in ("ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
            record = self.runtime.jobs.get(call.execution_id)
            if record is not None and record.terminal:
                return record.to_result()
            why = f"the worker holding its resource could not run it ({status.lower()}: {output})"
            return TaskResult(
                task_id=call.task_id, execution_id=call.execution_id, status=TaskStatus.FAILED,
                message=why[:2000], data={"interrupted": True},
            )  # fmt: skip
        return None

    def _follow(self, execution_id: str) -> None:
        with contextlib.suppress(StoreError):  # a missed beat: the next one, a second on, may land
            WorkerStore(self.runtime.db).follow(execution_id)

    def _owned(self, resource: str) -> bool:
        """Whether a live worker of this version owns ``resource`` (it runs the call, or takes it over)."""
        lease_s = self.runtime.cluster_settings.lease_s
        workers = WorkerStore(self.runtime.db, lease_s).workers(alive_only=True)
        return any(w.version == self.version for w in live_owners(workers, resource, lease_s))

    def _stranded(self, c: Any, call: Forwarded, resource: str) -> TaskResult | None:
        """The call's end once no live worker of this version has owned ``resource`` for a lease (its
        owners died or left, and no peer of theirs is left to take the call over): its workflow is
        cancelled, so that a worker started later never runs it behind its caller's back, and the call
        ends as what can be known of it."""
        durable.cancel_workflows(self.runtime, [remote_id(call.execution_id)])
        status, _ = durable.outcome(c, remote_id(call.execution_id))
        if status == "SUCCESS":  # it ended just before
            return self._done(c, call)
        record = self.runtime.jobs.get(call.execution_id)
        if record is not None and record.terminal:
            return record.to_result()
        if record is None:
            why = (f"no worker of this version owns {resource} any more (its owners stopped or were lost "
                   "before they took the call): it never started")  # fmt: skip
            data: dict[str, Any] = {"never_started": True}
            with contextlib.suppress(StoreError):  # its caller's "still waiting", for a job never made
                WorkerStore(self.runtime.db).drop_requests([call.execution_id])
        else:
            why = (f"the worker running it on {record.host or '?'} was lost and no worker of this version "
                   f"owns {resource} any more to take it over: whether it finished is unknown")  # fmt: skip
            data = {"interrupted": True}
        return TaskResult(
            task_id=call.task_id, execution_id=call.execution_id, status=TaskStatus.FAILED, message=why,
            data=data,
        )  # fmt: skip


FOLLOW_S = 0.1
OWNERS_EVERY_S = 1.0  # how often a forwarded call not yet ended checks that its resource still has an owner


def remote_id(execution_id: str) -> str:
    """The workflow id of a forwarded call: forwarding one execution twice runs it once."""
    return f"call-{execution_id}"


def run_forwarded(executor: Executor, value: dict[str, Any]) -> Any:
    """What the holder runs for a forwarded call (``engine.remote_call``'s step): the executor's own
    ``execute``, as the caller, with its consent, under its execution id — admitted again here."""
    from tether.tasks.confirm import Confirmation
    from tether.tasks.grants import Grants

    call = Forwarded.from_json(value)
    consent = Confirmation(**call.confirmation) if call.confirmation else None
    return executor.execute(
        call.task_id, call.params, caller=call.caller, grants=Grants.from_json(call.grants),
        confirmation=consent, detach=call.detach, origin=call.origin, step_id=call.step_id,
        execution_id=call.execution_id, placed=True,
    )  # fmt: skip
