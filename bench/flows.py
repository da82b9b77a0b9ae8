"""The supervisor's engine against its floor: a plain DBOS workflow of as many plain steps (each returns a
dict, nothing else), on SQLite and on PostgreSQL, each in its own process (DBOS is one per process).

- flows of 20 and of 1,000 trivial tasks (inline: no worker process), in waves of 4, against the plain
  workflow (goal ≤ 1.5x); for the record also against the same calls as DBOS steps that call the executor,
  and against LangGraph with its SQLite checkpointer (SQLite only);
- bytes written per flow step, against the plain workflow: what this process hands to ``write(2)``
  (``wchar`` in /proc/self/io: WAL frames, checkpoints into the database files, logs), with every WAL
  checkpointed before the count closes; on PostgreSQL also the server's backends that serve the bench's
  database (their own ``wchar``; the shared WAL writer and checkpointer are not counted);
- a 20-task flow of real worker tasks (one process each) against the same 20 executions called directly;
- time from a person's approval (`tether flow approve`'s call) to the continuation's first step.

CPU is this process (getrusage: the engine, DBOS and the inline tasks run here), plus on PostgreSQL the
backends serving the bench's database (psutil).
"""
# pyright: reportMissingImports=false

from __future__ import annotations

import asyncio
import contextlib
import operator
import os
import secrets
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Generator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypedDict

from dbos import DBOS

from bench import goals
from bench.paired import Cpu, Pair, row, why_not
from bench.registry import registry
from tether.execution.executor import Executor
from tether.runtime import Runtime
from tether.supervisor import durable, engine, service
from tether.supervisor.plan import Call, Plan, Task

PG_URL_ENV = "TETHER_TEST_PG_URL"  # the tests' server, the same default
PG_URL = os.environ.get(PG_URL_ENV, "postgresql+psycopg://tether:tether@127.0.0.1:5432/tether_test")
SMALL_ENV = "TETHER_BENCH_SMALL"  # `python -m bench --small`: fewer and smaller flows, to prove the rows
SIZES = (20, 200) if os.environ.get(SMALL_ENV) else (20, 1000)
ROUNDS = {20: 9, 200: 3, 1000: 3}
POLL_S = 0.01  # ours and the floor both poll for their result this often
WAVE = 4
FLOOR = "bench.floor_flow"
FLOOR_EXEC = "bench.floor_exec_flow"


class _State(TypedDict):
    done: Annotated[list[int], operator.add]


@DBOS.step(name="bench.floor_step", retries_allowed=False)
async def floor_step(i: int) -> dict[str, Any]:
    return {"status": "completed", "i": i}


@DBOS.workflow(name=FLOOR)
async def floor_flow(n: int) -> int:
    done = 0
    for start in range(0, n, WAVE):
        results = await asyncio.gather(*(floor_step(i) for i in range(start, min(n, start + WAVE))))
        done += len(results)
    return done


_EXECUTOR: list[Executor] = []  # the executor the hand-written workflow below calls


@DBOS.step(name="bench.floor_exec_step", retries_allowed=False)
async def floor_exec_step(workflow_id: str, i: int) -> dict[str, Any]:
    # What a hand-written durable workflow does with tether's tasks: each one a step, run through the
    # executor under an execution id derived from the workflow and the step (exactly once on replay).
    result = await _EXECUTOR[0].execute("b.inline", caller="cli", execution_id=f"{workflow_id}-{i}")
    return {"status": result.status.value}


@DBOS.workflow(name=FLOOR_EXEC)
async def floor_exec_flow(n: int) -> int:
    workflow_id = DBOS.workflow_id or "floor"
    done = 0
    for start in range(0, n, WAVE):
        steps = (floor_exec_step(workflow_id, i) for i in range(start, min(n, start + WAVE)))
        done += sum(r["status"] == "completed" for r in await asyncio.gather(*steps))
    return done


def _plan(n: int, task: str) -> Plan:
    return Plan(
        caller="cli", max_parallel=WAVE, tasks=[Task(id=f"t{i}", call=Call(task=task)) for i in range(n)]
    )


async def _ours(runtime: Runtime, n: int, task: str = "b.inline") -> float:
    """Seconds from the call to seeing the run completed (the plain workflow is timed the same way)."""
    started = time.perf_counter()
    record = await asyncio.to_thread(service.start, runtime, registry, _plan(n, task))
    while True:
        # the head only: a whole-run read per poll would decode every attempt and tax the run it measures
        run = await asyncio.to_thread(runtime.runs.view, record.run_id, task_ids=[])
        assert run is not None
        if run.status != "running":
            assert run.status == "completed", (run.status, run.message)
            return time.perf_counter() - started
        await asyncio.sleep(POLL_S)


async def _floor(runtime: Runtime, n: int, workflow: str = FLOOR) -> float:
    started = time.perf_counter()
    with durable.client(runtime) as c:
        handle = await c.enqueue_async(
            {"workflow_name": workflow, "queue_name": c.names.queue, "app_version": c.names.version}, n
        )
        assert await handle.get_result(polling_interval_sec=POLL_S) == n
    return time.perf_counter() - started


def _langgraph(path: Path, n: int) -> float | None:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    graph = StateGraph(_State)
    waves = [list(range(s, min(n, s + WAVE))) for s in range(0, n, WAVE)]
    for wave in waves:
        for i in wave:
            graph.add_node(f"t{i}", lambda state, i=i: {"done": [i]})
    for k, wave in enumerate(waves):
        sources = [START] if k == 0 else [f"t{i}" for i in waves[k - 1]]
        for i in wave:
            graph.add_edge(sources if len(sources) > 1 else sources[0], f"t{i}")
    for i in waves[-1]:
        graph.add_edge(f"t{i}", END)
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        app = graph.compile(checkpointer=SqliteSaver(conn))
        started = time.time()
        out = app.invoke(
            {"done": []},
            {"configurable": {"thread_id": f"bench-{time.time_ns()}"}, "recursion_limit": n + 10},
        )
        assert len(out["done"]) == n
        return time.time() - started
    finally:
        conn.close()


class Written:
    """Bytes handed to ``write(2)`` so far by this process and, on PostgreSQL, by the backends serving
    the bench's database. ``close()`` checkpoints every SQLite WAL first: a step's bytes then include
    their copy into the database file, whenever SQLite would have made it."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.sqlite = [runtime.home / durable.DBOS_FILE, runtime.home / "tether.db"]
        self.postgresql = not runtime.db.url.startswith("sqlite")

    def sample(self, *, close: bool = False) -> dict[int, int]:
        """What each process has written so far, by pid."""
        if close and not self.postgresql:
            for path in self.sqlite:
                with contextlib.closing(sqlite3.connect(path)) as conn:
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pids = [os.getpid(), *(_backends(self.runtime) if self.postgresql else [])]
        return {pid: _wchar(pid) for pid in pids}

    @staticmethod
    def since(before: dict[int, int], after: dict[int, int]) -> int:
        """Bytes written between two samples: per process, so a backend that left in between takes its
        count with it instead of making the sum negative (its own writes in the window are not seen)."""
        return sum(max(0, n - before.get(pid, 0)) for pid, n in after.items())


def _wchar(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass  # gone, or not ours to read
    return 0


def _backends(runtime: Runtime) -> list[int]:
    """The PostgreSQL backends connected to the bench's database, this query's own left out."""
    from sqlalchemy import text

    with runtime.db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
            )
        )
        return [int(r[0]) for r in rows]


async def _until(runtime: Runtime, run_id: str, done: Any) -> None:
    while True:
        run = await asyncio.to_thread(runtime.runs.view, run_id, task_ids=[])
        assert run is not None
        if done(run.status):
            return
        await asyncio.sleep(0.01)


async def _approval_latency(runtime: Runtime) -> float:
    plan = Plan(caller="cli", tasks=[Task(id="gate", call=Call(task="b.inline"), review="before")])
    record = await asyncio.to_thread(service.start, runtime, registry, plan)
    await _until(runtime, record.run_id, lambda status: status != "running")
    started = time.time()
    await asyncio.to_thread(service.answer, runtime, registry, record.run_id, "gate", "approve")
    while True:
        run = await asyncio.to_thread(runtime.runs.get, record.run_id)
        assert run is not None
        if run.attempts:
            return datetime.fromisoformat(run.attempts[0].started_at).timestamp() - started
        await asyncio.sleep(0.002)


def flows(home: Path) -> None:
    """Each database in its own process: DBOS launches once per process."""
    for backend in ("sqlite", "postgresql"):
        where = home / backend
        done = subprocess.run([sys.executable, "-m", "bench.flows", backend, str(where)], check=False)
        if done.returncode != 0:
            print(f"  flows on {backend}: the bench process failed ({done.returncode})")


def _backend(backend: str, home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    if backend == "sqlite":
        asyncio.run(_flows(home, backend))
        return
    try:
        database = _fresh_pg_database()
        url = next(database)
    except Exception as exc:  # any failure to reach the server is the reason the row is missing
        print(f"\nflows on PostgreSQL: not measured: no server at {PG_URL} ({exc}); set {PG_URL_ENV}")
        return
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        (home / "settings.toml").write_text(
            f'[store]\ndatabase_url = "postgresql+psycopg://{parsed.username}@{parsed.host}:'
            f'{parsed.port or 5432}/{parsed.database}"\n'
        )
        os.environ["TETHER_API_KEY_DATABASE"] = parsed.password or ""
        asyncio.run(_flows(home, backend))
    finally:
        database.close()


def _fresh_pg_database() -> Generator[str]:
    """A new database on the tests' server, yielded once and dropped when the generator is closed."""
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    url = make_url(PG_URL)
    name = f"tether_bench_{secrets.token_hex(6)}"
    admin = psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, password=url.password,
        dbname=url.database, autocommit=True, connect_timeout=5,
    )  # fmt: skip
    try:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.close()


async def _flows(home: Path, backend: str) -> None:
    with Runtime.open(home) as runtime, Executor(registry, runtime=runtime) as executor:
        await engine.launch(runtime, executor)
        try:
            await _report(home, runtime, executor, backend)
        finally:
            engine.shutdown()


async def _timed(cpu: Cpu, run: Awaitable[float | None]) -> tuple[float | None, float]:
    """``run``'s own measurement (seconds, or None when it could not run) and its CPU seconds."""
    cpu_start = cpu.sample(before=True)
    value = await run
    return value, cpu.sample(before=False) - cpu_start


def _pair(n: int, ours: list[tuple[float, float]], other: list[tuple[float, float]], label: str) -> Pair:
    """Per task: wall medians and the median of the paired wall ratios; CPU totals and their ratio."""
    return Pair(
        ours_ms=statistics.median(w for w, _ in ours) / n * 1000,
        floor_ms=statistics.median(w for w, _ in other) / n * 1000,
        ratio=statistics.median(o[0] / t[0] for o, t in zip(ours, other, strict=True)),
        ours_cpu_ms=sum(c for _, c in ours) / len(ours) / n * 1000,
        floor_cpu_ms=sum(c for _, c in other) / len(other) / n * 1000,
        cpu_ratio=sum(c for _, c in ours) / max(sum(c for _, c in other), 1e-9),
        cpu_label=label,
    )


async def _report(home: Path, runtime: Runtime, executor: Executor, backend: str) -> None:
    postgresql = backend == "postgresql"
    database = "PostgreSQL" if postgresql else "SQLite"
    print(f"\nflows (the supervisor's engine on DBOS, {database}, in-process executor)")
    _EXECUTOR[:] = [executor]
    if postgresql:
        cpu = Cpu(
            "this process (getrusage) + its PostgreSQL backends (psutil)", roots=lambda: _backends(runtime)
        )
    else:
        cpu = Cpu.here()
    await _ours(runtime, 8)
    await _floor(runtime, 8)
    await _floor(runtime, 8, FLOOR_EXEC)
    for n in SIZES:
        names = ("ours", "floor", "exec") if postgresql else ("ours", "floor", "exec", "peer")
        took: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for i in range(ROUNDS[n]):
            # interleaved rounds, the order reversed every other one: the median of the paired ratios
            # rides out a noisy machine
            for name in names if i % 2 == 0 else names[::-1]:
                if name == "ours":
                    run: Awaitable[float | None] = _ours(runtime, n)
                elif name == "floor":
                    run = _floor(runtime, n)
                elif name == "exec":
                    run = _floor(runtime, n, FLOOR_EXEC)
                else:
                    run = asyncio.to_thread(_langgraph, home / f"langgraph-{n}-{i}.sqlite", n)
                value, spent = await _timed(cpu, run)
                if value is not None:
                    took[name].append((value, spent))
        floor = f"a plain DBOS workflow of {n:,} plain steps, waves of {WAVE}"
        row(f"{n:,} trivial tasks, per task", _pair(n, took["ours"], took["floor"], cpu.label), floor,
            goals.FLOW)  # fmt: skip
        row(f"{n:,} trivial tasks, per task", _pair(n, took["ours"], took["exec"], cpu.label),
            "the same as DBOS steps calling the executor (for the record)")  # fmt: skip
        if took.get("peer"):
            row(f"{n:,} trivial tasks, per task", _pair(n, took["ours"], took["peer"], cpu.label),
                "LangGraph + SqliteSaver, no executor (for the record)")  # fmt: skip
        elif not postgresql:
            print("    (LangGraph not installed here: `make bench` installs it in .venv-bench)")

    await _bytes_written(runtime, postgresql)
    await _worker_flow(runtime, executor)

    latencies, cpus = [], []
    for _ in range(5):
        latency, spent = await _timed(cpu, _approval_latency(runtime))
        assert latency is not None
        latencies.append(latency)
        cpus.append(spent)
    print(
        f"  approval → the continuation's first step: median {statistics.median(latencies) * 1000:6.0f} ms"
        f" (max {max(latencies) * 1000:.0f} ms; queue polling {durable.POLL_S * 1000:.0f} ms);"
        f" CPU {statistics.median(cpus) * 1000:.0f} ms a round (no goal)"
    )
    print(f"  {'':<44} paired with: nothing; CPU of {cpu.label}, the whole round")


async def _bytes_written(runtime: Runtime, postgresql: bool) -> None:
    """Bytes written per flow step, ours next to the plain workflow of as many steps, at two sizes."""
    written = Written(runtime)
    what = "this process + its PostgreSQL backends" if postgresql else "this process, WALs checkpointed"
    for size in SIZES[-1:] if postgresql else (100, SIZES[-1]):
        per_step: dict[str, float] = {}
        for name in ("ours", "floor"):
            before = written.sample(close=True)
            await (_ours(runtime, size) if name == "ours" else _floor(runtime, size))
            per_step[name] = written.since(before, written.sample(close=True)) / size
        ratio = per_step["ours"] / per_step["floor"]
        verdict = "met" if ratio <= goals.FLOW_BYTES else "not met"
        print(
            f"  bytes written per step, {size:>5} steps             ours {per_step['ours']:8,.0f} B"
            f"   floor {per_step['floor']:8,.0f} B = {ratio:6.2f}x   goal ≤ {goals.FLOW_BYTES:g}x: {verdict}"
        )
        print(f"  {'':<44} paired with: a plain DBOS workflow of as many steps; wchar of {what}")
        if verdict == "not met":
            why_not(goals.FLOW_BYTES_WHY["postgresql" if postgresql else "sqlite"])


async def _worker_flow(runtime: Runtime, executor: Executor) -> None:
    """20 real worker tasks (one process each) as a flow, against the same 20 executions called directly."""
    cpu = Cpu.tree("this process tree: the executor's fork server and workers (psutil)")

    async def calls() -> float:
        started = time.perf_counter()
        for _ in range(20):
            result = await executor.execute("b.sync", caller="cli")
            assert result.status.value == "completed", result
        return time.perf_counter() - started

    direct: list[tuple[float, float]] = []
    flow: list[tuple[float, float]] = []
    for i in range(4):
        for name in ("flow", "direct") if i % 2 == 0 else ("direct", "flow"):
            value, spent = await _timed(cpu, _ours(runtime, 20, "b.sync") if name == "flow" else calls())
            assert value is not None
            (flow if name == "flow" else direct).append((value, spent))
    row("20 worker tasks as a flow, per task", _pair(20, flow, direct, cpu.label),
        "the same 20 executions called one by one (no goal)")  # fmt: skip


if __name__ == "__main__":
    _backend(sys.argv[1], Path(sys.argv[2]))
