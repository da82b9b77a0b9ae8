"""Several hosts against their floor: ``tether worker``s on homes of one installation (each joined as
``tether cluster join`` joins it, with a node name of its own, all on 127.0.0.1) on one PostgreSQL
database, next to plain DBOS processes doing the same on a database of their own.

- **a backlog drained by 1, 2 and 4 workers**: ``BACKLOG`` flow runs of one inline task each, enqueued up
  front with ``service.start``, against as many plain DBOS workflows of one plain step enqueued through
  one ``DBOSClient`` and drained by as many plain DBOS processes, their queue set as tether sets its
  installation's (each worker runs at most ``CONCURRENCY`` at once, ``[cluster] concurrency``; polled
  every ``durable.POLL_S``). Every worker of both sides is started once and kept frozen (SIGSTOP) except
  while it drains: a backlog is enqueued with every worker frozen, the clock starts when the round's
  workers are let go and stops once no workflow of the side is enqueued or pending (looked at every
  ``WATCH_S``). Rounds alternate the sides, the order reversed every other round; a row is the median of
  the per-round ratios, and says how the backlog was split among the workers. The workers' lease is
  ``LEASE_S``, so that a frozen worker is never taken for lost (a heartbeat costs the same whatever the
  lease). A worker holds connections in proportion to what it runs at once, and eight processes share a
  server that takes 100: a round whose runs failed because the server refused connections is done again
  (the row says how often);
- **the cost per one-task run**: the CPU of enqueuing (this process and the backends of the side's
  database) and of draining (the workers' process trees and the backends), against plain DBOS
  (``goals.CLUSTER_RUN``); a run of one task carries the whole of a run's own cost (its record, its
  workflow segment, its decisions), which the floor's workflow of one step has no counterpart of;
- **the cost per task** (issue 25: ≤ 1.5x, ``goals.CLUSTER_TASK``): the same backlog, ``BACKLOG`` runs of
  ``TASKS`` inline tasks each, a chain (each task ``depends_on`` the one before, so they run one after
  the other as the floor's steps do; the task is idempotent, as a plain step is at-least-once, so each
  is claimed with the end of the one before: a must-run-once task takes a claim of its own), against
  as many plain DBOS workflows that await ``TASKS`` plain steps in sequence (``FLOOR_RUN_MANY``), drained by
  ``CHAINED_BY`` workers a side, frozen, let go, interleaved and paired as above; its CPU, enqueue and
  drain, divided by the tasks (``BACKLOG`` × ``TASKS``), as ``goals.FLOW`` measures a flow of many
  tasks on one host;
- **a forwarded call's hand-off**: this process, an ``Executor`` whose placement forwards through
  ``cluster.DbosForwarder``, calls a task claiming a resource another ``tether worker`` owns: from the
  call handed to the forwarder (which enqueues through the process's DBOS client) to the task's first
  line in its worker on the holder, and the whole call, against a plain enqueue through a ready
  ``DBOSClient`` to one plain DBOS process listening to a queue of its own (global concurrency 1, polled
  every ``durable.POLL_S``, as tether sets a resource's queue), whose result is followed as often as the
  forwarder follows its own (``cluster.FOLLOW_S``).

CPU is read per process (psutil: user + system, reaped children included) before and after each window,
summed over the processes seen at the end; the backends are those connected to the side's database, the
bench's own connections left out. A backend that connects and leaves inside one window is not seen (its
CPU goes to the postmaster, which serves every database of the server): neither side should open one, as
each process keeps its DBOS client (ours, ``durable.shared_client``; the floor, one ``DBOSClient``).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import goals
from bench.hosts import STARTED_WITHIN_S, Backends, Meter, Proc, connect, spent, start_process, system_url
from bench.paired import Pair, row
from tether.tasks.context import TaskContext
from tether.tasks.spec import CLI, Isolation, Registry, TaskSpec

SMALL_ENV = "TETHER_BENCH_SMALL"  # `python -m bench --small`: a smaller backlog and fewer rounds
SMALL = bool(os.environ.get(SMALL_ENV))
WORKERS = (1, 2, 4)
BACKLOG = 6 if SMALL else 8
ROUNDS = 1 if SMALL else 4
TASKS = 10  # tasks a run of the chained backlog has: its run's own cost then a small share of each
CHAINED_BY = 2  # workers that drain the chained backlog, on each side
HAND_OFFS = 4 if SMALL else 15
WARMUP = 2
CONCURRENCY = 2  # runs one worker takes at once ([cluster] concurrency; the floor's worker_concurrency)
REDO = 3  # rounds done again, at most, when the server ran out of connections (it is shared)
LEASE_S = 600.0  # longer than the row: a worker frozen while the other side drains is never lost
WATCH_S = 0.01  # how often the bench looks for a drained backlog, on both sides
DRAINED_WITHIN_S = 180.0
READY = re.compile(r"executor (\S+) runs the flows")  # `tether worker`'s line once it executes
FLOOR_READY = "plain DBOS listens"
FLOOR_APP = "bench-cluster"
FLOOR_VERSION = "bench-cluster-1"
DRAIN_QUEUE = "bench-cluster-drain"
HAND_OFF_QUEUE = "bench-cluster-hand-off"
FLOOR_RUN = "bench.cluster.run"
FLOOR_RUN_MANY = "bench.cluster.run_many"
FLOOR_STAMP = "bench.cluster.stamp"
RESOURCE = "arm"
REGISTRY = "bench.cluster:registry"
NOT_DONE = ["ENQUEUED", "PENDING", "DELAYED"]


def began(ctx: TaskContext) -> dict[str, float]:
    """When the task started, by this machine's clock (the one every host of the bench reads)."""
    return {"began": time.time()}


registry = Registry(ref=REGISTRY)
registry.add(
    TaskSpec(
        task_id="c.small",
        handler="bench.cluster:began",
        exposed_to={CLI},
        resources=(),
        isolation=Isolation.INLINE,
        idempotent=True,
    )
)
registry.add(
    TaskSpec(task_id="c.arm", handler="bench.cluster:began", exposed_to={CLI}, resources=(RESOURCE,))
)


@dataclass(slots=True, kw_only=True)
class Drain:
    enqueue_s: float
    enqueue_cpu_s: float
    drain_s: float
    drain_cpu_s: float
    drain_pg_s: float  # of which the PostgreSQL backends
    split: list[int]  # how many of the backlog each worker took, in the workers' order

    def total_s(self) -> float:
        return self.enqueue_s + self.drain_s

    def total_cpu_s(self) -> float:
        return self.enqueue_cpu_s + self.drain_cpu_s


@dataclass(slots=True, kw_only=True)
class Side:
    """One side: its database, its workers, and the bench's connection that watches its workflows."""

    name: str
    url: str  # its database, with the bench's password
    database: str
    start: Callable[[int], Proc]  # its k-th worker, started
    workers: list[Proc] = field(default_factory=list)
    watch: Any = None

    def open_watch(self, backends: Backends) -> None:
        self.watch = connect(self.url)
        backends.ignored.add(int(self.watch.info.backend_pid))

    def query(self, sql: str, *args: Any) -> list[Any]:
        return list(self.watch.execute(sql, args).fetchall())

    def waiting(self) -> int:
        return int(
            self.query("SELECT count(*) FROM dbos.workflow_status WHERE status = ANY(%s)", NOT_DONE)[0][0]
        )

    def dequeued(self, workflow_id: str) -> float:
        """When DBOS's claim of a workflow began (the database's clock: this machine's)."""
        found = self.query(
            "SELECT started_at_epoch_ms FROM dbos.workflow_status WHERE workflow_uuid = %s", workflow_id
        )
        return float(found[0][0]) / 1000

    def check(self, workflow_ids: list[str]) -> list[int]:
        """How many of ``workflow_ids`` each worker ran; every one succeeded, or the row fails."""
        rows = self.query(
            "SELECT status, executor_id, count(*) FROM dbos.workflow_status"
            " WHERE workflow_uuid = ANY(%s) GROUP BY status, executor_id",
            workflow_ids,
        )
        took = {str(r[1]): int(r[2]) for r in rows if r[0] == "SUCCESS"}
        split = [took.get(w.executor_id, 0) for w in self.workers]
        if sum(split) != len(workflow_ids):
            raise RuntimeError(
                f"{self.name}: of {len(workflow_ids)} workflows, {rows} (by status and executor;"
                f" the workers: {[w.executor_id for w in self.workers]})"
            )
        return split


class OutOfConnections(RuntimeError):
    """A round's runs failed because the PostgreSQL server refused connections (``too many clients``)."""


class Bench:
    """Both sides set up (``set_up``), measured, and stopped (``close``)."""

    def __init__(self, home: Path, ours_url: str, floor_url: str, admin_url: str) -> None:
        from sqlalchemy.engine import make_url

        self.home = home
        self.backends = Backends(admin_url)
        self.ours = Side(
            name="ours",
            url=ours_url,
            database=make_url(ours_url).database or "",
            start=lambda k: self._tether_worker(f"n{k + 1}"),
        )
        self.floor = Side(
            name="floor",
            url=floor_url,
            database=make_url(floor_url).database or "",
            start=lambda k: self._floor_worker(f"floor-{k + 1}", DRAIN_QUEUE),
        )
        self.password = make_url(ours_url).password or ""
        self.here = home / "here"  # this process's home: where a person's commands would run
        self.runtime: Any = None
        self.client: Any = None
        self.others: list[Proc] = []
        self.redone = 0

    def _home(self, path: Path, node: str) -> None:
        from sqlalchemy.engine import make_url

        from tether.installation import installation_id, join

        url = make_url(self.ours.url)
        path.mkdir(parents=True, exist_ok=True)
        # The password reaches tether through TETHER_API_KEY_DATABASE, never the settings file.
        (path / "settings.toml").write_text(
            f'[store]\ndatabase_url = "postgresql+psycopg://{url.username}@{url.host}:{url.port or 5432}/'
            f'{url.database}"\n[cluster]\nnode = "{node}"\nlease_s = {LEASE_S:g}\n'
            f"concurrency = {CONCURRENCY}\n"
        )
        if path != self.here:
            join(path, installation_id(self.here))

    def _tether_worker(self, node: str, *args: str) -> Proc:
        self._home(self.home / node, node)
        command = [
            sys.executable,
            "-m",
            "tether.interfaces.cli",
            "--home",
            str(self.home / node),
            "--registry",
            REGISTRY,
            "worker",
            *args,
        ]

        def ready(text: str) -> str | None:
            found = READY.search(text)
            return found.group(1) if found else None

        log = self.home / f"{node}.log"
        return start_process(
            f"tether worker {node}", command, log, ready, TETHER_API_KEY_DATABASE=self.password
        )

    def _floor_worker(self, executor_id: str, queue: str) -> Proc:
        from tether.supervisor import durable

        command = [
            sys.executable,
            "-m",
            "bench.cluster",
            "floor",
            system_url(self.floor.url),
            executor_id,
            queue,
            str(durable.POLL_S),
        ]
        log = self.home / f"{executor_id}.log"
        return start_process(
            f"plain DBOS {executor_id}",
            command,
            log,
            lambda text: executor_id if FLOOR_READY in text else None,
        )

    def set_up(self) -> None:
        """The homes, both databases' schemas and queues, then every worker, started at once and frozen
        once ready."""
        from dbos import DBOS, DBOSClient

        from tether.runtime import Runtime
        from tether.supervisor import durable

        os.environ["TETHER_API_KEY_DATABASE"] = self.password  # this process's runtime, as a person's
        self._home(self.here, "here")
        self.runtime = Runtime.open(self.here)
        durable.prepare(
            durable.system_url(self.runtime), durable.names(self.runtime.installation.id), CONCURRENCY
        )
        DBOS.migrate(system_url(self.floor.url))
        self.client = DBOSClient(system_database_url=system_url(self.floor.url), application_name=FLOOR_APP)
        self.client.register_queue(
            DRAIN_QUEUE, polling_interval_sec=durable.POLL_S, worker_concurrency=CONCURRENCY
        )
        self.client.register_queue(HAND_OFF_QUEUE, global_concurrency=1, polling_interval_sec=durable.POLL_S)
        for k in range(max(WORKERS)):
            self.ours.workers.append(self.ours.start(k))
            self.floor.workers.append(self.floor.start(k))
        for worker in [*self.ours.workers, *self.floor.workers]:
            worker.wait_ready()
        for worker in [*self.ours.workers, *self.floor.workers]:
            worker.freeze()
        self.ours.open_watch(self.backends)
        self.floor.open_watch(self.backends)

    def close(self) -> None:
        for worker in [*self.ours.workers, *self.floor.workers, *self.others]:
            worker.stop()
        for side in (self.ours, self.floor):
            if side.watch is not None:
                side.watch.close()
        if self.client is not None:
            self.client.destroy()
        if self.runtime is not None:
            self.runtime.close()
        self.backends.close()

    # -- the backlog -----------------------------------------------------------------------------

    def _enqueue(self, side: Side, tag: str, tasks: int) -> list[str]:
        """The backlog of runs of ``tasks`` tasks, on record and enqueued: its DBOS workflow ids."""
        if side is self.floor:
            ids = [f"floor-{tag}-{k}" for k in range(BACKLOG)]
            for k, workflow_id in enumerate(ids):
                name, args = (FLOOR_RUN, (k,)) if tasks == 1 else (FLOOR_RUN_MANY, (k, tasks))
                self.client.enqueue(
                    {
                        "workflow_name": name,
                        "queue_name": DRAIN_QUEUE,
                        "workflow_id": workflow_id,
                        "app_version": FLOOR_VERSION,
                    },
                    *args,
                )
            return ids
        from tether.supervisor import durable, service
        from tether.supervisor.plan import Call, Plan, Task

        chain = [
            Task(id=f"t{j}", call=Call(task="c.small"), depends_on=[f"t{j - 1}"] if j else [])
            for j in range(tasks)
        ]
        plan = Plan(caller="cli", tasks=chain)
        runs = [service.start(self.runtime, registry, plan).run_id for _ in range(BACKLOG)]
        return [durable.segment_id(run_id, 0) for run_id in runs]

    def drain(self, side: Side, n: int, tag: str, tasks: int) -> Drain:
        """Enqueue the backlog (runs of ``tasks`` tasks) with every worker frozen, then let ``n`` of them go
        until it is drained."""
        workers = side.workers[:n]
        enqueuing = Meter(procs=list, backends=self.backends, database=side.database, own=True)
        draining = Meter(procs=lambda: workers, backends=self.backends, database=side.database)
        before = enqueuing.sample(before=True)
        start = time.perf_counter()
        ids = self._enqueue(side, tag, tasks)
        enqueue_s = time.perf_counter() - start
        enqueue_cpu = spent(before, enqueuing.sample(before=False))
        logged = [worker.log.stat().st_size for worker in workers]
        before = draining.sample(before=True)
        start = time.perf_counter()
        for worker in workers:
            worker.thaw()
        deadline = time.monotonic() + DRAINED_WITHIN_S
        while side.waiting():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{side.name}: the backlog not drained in {DRAINED_WITHIN_S:g} s")
            time.sleep(WATCH_S)
        drain_s = time.perf_counter() - start
        after = draining.sample(before=False)
        for worker in workers:
            worker.freeze()
        try:
            split = side.check(ids)
        except RuntimeError as exc:
            for worker, offset in zip(workers, logged, strict=True):
                with open(worker.log, "rb") as log:
                    log.seek(offset)
                    if b"too many clients" in log.read():
                        raise OutOfConnections(str(exc)) from exc
            raise
        if side is self.ours:  # and tether's record says every run completed
            runs = [workflow_id.rpartition(".")[0] for workflow_id in ids]
            ended = side.query(
                "SELECT status, count(*) FROM runs WHERE run_id = ANY(%s) GROUP BY status", runs
            )
            if {str(r[0]): int(r[1]) for r in ended} != {"completed": BACKLOG}:
                raise RuntimeError(f"ours: the runs ended {ended}")
        return Drain(
            enqueue_s=enqueue_s,
            enqueue_cpu_s=enqueue_cpu,
            drain_s=drain_s,
            drain_cpu_s=spent(before, after),
            drain_pg_s=spent(before, after, "pg"),
            split=split,
        )

    def _redone(self, side: Side, n: int, tag: str, tasks: int) -> Drain:
        """A round, done again (up to ``REDO`` times in the row) when the server ran out of connections:
        another user of it may have taken them, and the round's runs failed."""
        attempt = 0
        while True:
            try:
                return self.drain(side, n, f"{tag}-{attempt}", tasks)
            except OutOfConnections:
                attempt, self.redone = attempt + 1, self.redone + 1
                if self.redone > REDO:
                    raise

    def _rounds(self, n: int, tasks: int) -> tuple[list[Drain], list[Drain]]:
        """``ROUNDS`` rounds of ``n`` workers a side draining runs of ``tasks`` tasks, the sides alternating
        (which goes first alternates too): ours, the floor's."""
        took: dict[str, list[Drain]] = {"ours": [], "floor": []}
        for i in range(ROUNDS):
            for side in (self.ours, self.floor) if i % 2 == 0 else (self.floor, self.ours):
                took[side.name].append(self._redone(side, n, f"{tasks}x{n}-{i}", tasks))
        return took["ours"], took["floor"]

    def _drained(
        self, ours: list[Drain], floor: list[Drain], n: int, tasks: int, one_worker: float | None = None
    ) -> float:
        """The row of ``n`` workers draining the backlog, per task, and where its CPU went; our tasks/s,
        against ``one_worker``'s (0: this is one worker's) unless None."""
        per = BACKLOG * tasks
        pair = _pair(
            ours,
            floor,
            lambda d: d.drain_s,
            lambda d: d.drain_cpu_s,
            "the workers' process trees + their database's backends (psutil)",
            per,
        )
        s, es = ("s", "es") if n > 1 else ("", "")
        steps = "one plain step" if tasks == 1 else f"{tasks} plain steps in sequence"
        row(
            f"{n} worker{s} drain it, per task",
            pair,
            f"{n} plain DBOS process{es} draining {BACKLOG} workflows of {steps} from a queue set as tether's"
            f" (at most {CONCURRENCY} at once per worker, polled every 50 ms)",
        )
        pg = [sum(d.drain_pg_s for d in side) / len(side) / per * 1000 for side in (ours, floor)]
        took = ["+".join(map(str, side[-1].split[:n])) for side in (ours, floor)]
        rate = 1000 / pair.ours_ms
        than = "" if one_worker is None else f" ({rate / (one_worker or rate):.2f}x one worker's)"
        print(
            f"  {'':<44} tasks/s: ours {rate:.1f}{than}, floor {1000 / pair.floor_ms:.1f}; CPU in the"
            f" backends: ours {pg[0]:.1f} ms, floor {pg[1]:.1f} ms; runs each worker took (last round):"
            f" ours {took[0]}, floor {took[1]}"
        )
        return rate

    def drains(self) -> None:
        print(
            f"\nseveral hosts: a backlog of {BACKLOG} flow runs of one inline task, enqueued up front,"
            " drained by `tether worker`s of one installation (a home and a node name each, 127.0.0.1,"
            " PostgreSQL)"
        )
        every: list[tuple[Drain, Drain]] = []
        one_worker = 0.0
        for n in WORKERS:
            ours, floor = self._rounds(n, 1)
            every += zip(ours, floor, strict=True)
            rate = self._drained(ours, floor, n, 1, one_worker)
            one_worker = one_worker or rate
        if self.redone:
            print(f"  {'':<44} rounds done again after the server ran out of connections: {self.redone}")
        most = [self.backends.most.get(side.database, 0) for side in (self.ours, self.floor)]
        print(
            f"  {'':<44} connections to each side's database, the most seen at a window's end: ours"
            f" {most[0]}, floor {most[1]} ({max(WORKERS)} workers each, and this process's)"
        )
        ours, floor = [o for o, _ in every], [f for _, f in every]
        row(
            "enqueue, per task",
            _pair(
                ours,
                floor,
                lambda d: d.enqueue_s,
                lambda d: d.enqueue_cpu_s,
                "this process + its database's backends (psutil)",
                BACKLOG,
            ),
            "DBOSClient.enqueue of the plain workflow, one client for all (ours: service.start)",
        )
        row(
            "cost per one-task run: enqueue + drain",
            _pair(ours, floor, Drain.total_s, Drain.total_cpu_s, "the two rows above", BACKLOG),
            "the same for plain DBOS, every round of every worker count",
            goals.CLUSTER_RUN,
        )

    def chains(self) -> None:
        """The cost per task where a run's own cost is shared, as in a flow: runs of ``TASKS`` tasks."""
        print(
            f"\nseveral hosts: a backlog of {BACKLOG} flow runs of {TASKS} inline tasks in a chain (each"
            f" depends on the one before), enqueued up front, drained by {CHAINED_BY} `tether worker`s as"
            " above"
        )
        redone = self.redone
        ours, floor = self._rounds(CHAINED_BY, TASKS)
        self._drained(ours, floor, CHAINED_BY, TASKS)
        if self.redone > redone:
            again = self.redone - redone
            print(f"  {'':<44} rounds done again after the server ran out of connections: {again}")
        row(
            f"cost per task, runs of {TASKS} tasks: enqueue + drain",
            _pair(
                ours,
                floor,
                Drain.total_s,
                Drain.total_cpu_s,
                "this process, the workers' process trees + each side's database's backends (psutil)",
                BACKLOG * TASKS,
            ),
            f"plain DBOS workflows of {TASKS} plain steps in sequence, enqueued through one DBOSClient and"
            f" drained by {CHAINED_BY} plain DBOS processes",
            goals.CLUSTER_TASK,
        )

    # -- the hand-off ----------------------------------------------------------------------------

    def hand_offs(self) -> None:
        from tether.execution.executor import Executor
        from tether.store.workers import WorkerStore
        from tether.supervisor import cluster

        for worker in [*self.ours.workers, *self.floor.workers]:
            worker.stop()  # their part is over: only the holder and the listener run now
        holder = self._tether_worker("holder", "--resources", RESOURCE)
        listener = self._floor_worker("floor-listener", HAND_OFF_QUEUE)
        self.others += [holder, listener]
        holder.wait_ready()
        listener.wait_ready()
        peers = WorkerStore(self.runtime.db)
        deadline = time.monotonic() + STARTED_WITHIN_S
        while not peers.holders().get(RESOURCE, ("", 0.0))[0].startswith("holder/"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the holder did not take {RESOURCE} in time")
            time.sleep(0.05)
        handed: dict[str, float] = {}

        class Stamped(cluster.DbosForwarder):
            """The forwarder, noting when each call is handed to it."""

            async def __call__(self, call: Any, resource: str, on_start: Any) -> Any:
                handed[call.execution_id] = time.time()
                return await super().__call__(call, resource, on_start)

        loop = asyncio.new_event_loop()
        numbers = iter(range(1_000_000))
        try:
            with Executor(registry, runtime=self.runtime, forwarder=Stamped(self.runtime)) as executor:

                def ours() -> tuple[float, float, float]:
                    start = time.time()
                    result = loop.run_until_complete(executor.execute("c.arm", caller="cli"))
                    end = time.time()
                    assert result.status.value == "completed", result
                    at = handed[result.execution_id]
                    dequeued = self.ours.dequeued(cluster.remote_id(result.execution_id))
                    return float(result.data["began"]) - at, end - start, dequeued - at

                def floor() -> tuple[float, float, float]:
                    workflow_id = f"stamp-{next(numbers)}"
                    start = time.time()
                    handle = self.client.enqueue(
                        {
                            "workflow_name": FLOOR_STAMP,
                            "queue_name": HAND_OFF_QUEUE,
                            "workflow_id": workflow_id,
                            "app_version": FLOOR_VERSION,
                        }
                    )
                    stamped = float(handle.get_result(polling_interval_sec=cluster.FOLLOW_S))
                    end = time.time()
                    return stamped - start, end - start, self.floor.dequeued(workflow_id) - start

                meters = (
                    Meter(
                        procs=lambda: [holder], backends=self.backends, database=self.ours.database, own=True
                    ),
                    Meter(
                        procs=lambda: [listener],
                        backends=self.backends,
                        database=self.floor.database,
                        own=True,
                    ),
                )
                took = _interleaved(ours, floor, meters)
        finally:
            loop.close()
        self._report_hand_offs(*took)

    def _report_hand_offs(self, ours: list[Any], floor: list[Any]) -> None:
        from tether.supervisor import cluster, durable

        print(
            f"\nseveral hosts: a call forwarded to the `tether worker` that owns its resource ({HAND_OFFS}"
            " calls of a process task, the holder warm), from an executor on another node"
        )
        label = "this process + the holder's (listener's) process tree + its database's backends (psutil)"
        row(
            "handed over → the task starts on the holder",
            _pair(ours, floor, lambda t: t[0][0], lambda t: t[1], label),
            f"a plain enqueue → its step starts in the listener, its queue polled every"
            f" {durable.POLL_S * 1000:.0f} ms (CPU: the whole round)",
        )
        row(
            "round trip: the call → its result",
            _pair(ours, floor, lambda t: t[0][1], lambda t: t[1], label),
            f"the same plain enqueue → its result, followed every {cluster.FOLLOW_S * 1000:.0f} ms as the"
            " forwarder follows its own",
        )
        mine, plain = (
            [statistics.median(t[0][k] for t in side) * 1000 for k in (2, 0)] for side in (ours, floor)
        )
        print(
            f"  {'':<44} where a start goes (medians): ours, handed over → dequeued on the holder"
            f" {mine[0]:.0f} ms (the enqueue through the process's DBOS client, the holder's poll), → the"
            f" task's first line {mine[1] - mine[0]:.0f} ms (the call admitted again, its job, its process);"
            f" the floor, enqueue → dequeued {plain[0]:.0f} ms, → its step {plain[1] - plain[0]:.0f} ms"
        )


def _interleaved(
    ours: Callable[[], tuple[float, ...]], floor: Callable[[], tuple[float, ...]], meters: tuple[Meter, Meter]
) -> tuple[list[Any], list[Any]]:
    """``HAND_OFFS`` rounds of each after ``WARMUP``, alternating (which goes first alternates too): each
    round's figures and its CPU seconds."""
    for _ in range(WARMUP):
        ours()
        floor()
    took: tuple[list[Any], list[Any]] = ([], [])
    for i in range(HAND_OFFS):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            before = meters[side].sample(before=True)
            figures = (ours, floor)[side]()
            took[side].append((figures, spent(before, meters[side].sample(before=False))))
    return took


def _pair(
    ours: list[Any],
    floor: list[Any],
    wall: Callable[[Any], float],
    cpu: Callable[[Any], float],
    label: str,
    per: int = 1,
) -> Pair:
    """Per task (``per`` in a round): wall medians and the median of the paired wall ratios; CPU totals
    and their ratio."""
    return Pair(
        ours_ms=statistics.median(map(wall, ours)) / per * 1000,
        floor_ms=statistics.median(map(wall, floor)) / per * 1000,
        ratio=statistics.median(wall(o) / wall(f) for o, f in zip(ours, floor, strict=True)),
        ours_cpu_ms=sum(map(cpu, ours)) / len(ours) / per * 1000,
        floor_cpu_ms=sum(map(cpu, floor)) / len(floor) / per * 1000,
        cpu_ratio=sum(map(cpu, ours)) / max(sum(map(cpu, floor)), 1e-9),
        cpu_label=label,
    )


def cluster(home: Path) -> None:
    """In a process of its own: it puts the database's password in its environment, as a person's shell."""
    done = subprocess.run([sys.executable, "-m", "bench.cluster", "run", str(home)], check=False)
    if done.returncode != 0:
        print(f"  several hosts: the bench process failed ({done.returncode})")


def _run(home: Path) -> None:
    from bench.flows import PG_URL, PG_URL_ENV, _fresh_pg_database  # imports DBOS: only here

    databases: list[Generator[str]] = []
    try:
        for _ in range(2):  # ours, the floor: each on a database of its own
            databases.append(_fresh_pg_database())
        urls = [next(database) for database in databases]
    except Exception as exc:  # any failure to reach the server is the reason the row is missing
        print(f"\nseveral hosts: not measured: no server at {PG_URL} ({exc}); set {PG_URL_ENV}")
        for database in databases:
            database.close()
        return
    bench = Bench(home, urls[0], urls[1], PG_URL)
    try:
        bench.set_up()
        bench.drains()
        bench.chains()
        bench.hand_offs()
    except RuntimeError as exc:  # a worker that did not start, a backlog not drained: the row says why
        print(f"\nseveral hosts: not measured: {exc}")
        sys.exit(1)
    finally:
        bench.close()
        for database in databases:
            database.close()


def _floor(url: str, executor_id: str, queue: str, poll_s: float) -> None:
    """A plain DBOS process: the plain workflows, ``queue`` listened to, idle until stopped; its
    notifications polled as often as its queue, as tether sets them. DBOS and nothing of tether's."""
    from dbos import DBOS

    @DBOS.step(name="bench.cluster.step", retries_allowed=False)
    async def step(i: int) -> dict[str, Any]:
        return {"status": "completed", "i": i}

    @DBOS.workflow(name=FLOOR_RUN)
    async def run_one(i: int) -> int:
        return int((await step(i))["i"])

    @DBOS.workflow(name=FLOOR_RUN_MANY)
    async def run_many(i: int, n: int) -> int:
        for j in range(n):
            await step(i * n + j)
        return i

    @DBOS.step(name="bench.cluster.stamp_step", retries_allowed=False)
    async def stamp_step() -> float:
        return time.time()

    @DBOS.workflow(name=FLOOR_STAMP)
    async def stamp() -> float:
        return await stamp_step()

    DBOS(
        config={
            "name": FLOOR_APP,
            "system_database_url": url,
            "executor_id": executor_id,
            "application_version": FLOOR_VERSION,
            "notification_listener_polling_interval_sec": poll_s,
            "log_level": "WARNING",
            "run_migrations": False,
        }
    )
    DBOS.listen_queues([queue])
    DBOS.launch()
    print(FLOOR_READY, flush=True)
    try:
        signal.pause()  # until Ctrl-C (``Proc.stop``)
    except KeyboardInterrupt:
        DBOS.destroy(workflow_completion_timeout_sec=0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["floor"]:
        _floor(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    elif sys.argv[1:2] == ["run"]:
        _run(Path(sys.argv[2]))
