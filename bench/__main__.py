"""``make bench``: what a person feels, each figure next to its floor, as paired ratios.

Every row times ours and its floor alternately in one run and prints wall time (the median of the
per-pair ratios: two separate blocks swing 2-3x with the machine's load) and CPU time beside it (whose
CPU is named on the row: ``bench/paired.py``). A row says what it is paired with and judges the goal of
issue 20 (``bench/goals.py``) on the metric the goal names; rows issue 20 does not list keep issue 7's
target, named as such, or none. Floors are the same mechanism without tether (``bench/floors.py``):

- command start-up: ``python -c pass`` (the same interpreter); no verdict when it is itself slow;
- a warm process task: a preloaded fork server's child that publishes one file;
- a stop step: the same kind of child, from the signal to its exit;
- a turn on a long thread: a turn on a short one;
- a turn of the loop: LangGraph's prebuilt ReAct agent with persistence matched (SqliteSaver when
  tether keeps threads in SQLite); a tool call: LangGraph's ToolNode (installed in the bench venv);
- the supervisor's flows: a plain DBOS workflow of as many plain steps (``bench/flows.py``), on SQLite
  and on PostgreSQL, time and bytes written;
- an idle executor (``tether worker`` with nothing to run), CPU per second of wall: a plain DBOS process
  with one queue polled as often and nothing else, on SQLite and on PostgreSQL; for the record, the
  same with DBOS's defaults (``bench/idle.py``);
- several hosts (``tether worker``s of one installation on PostgreSQL): a backlog of flow runs drained by
  1, 2 and 4 of them, and a call forwarded to the worker that owns its resource: as many plain DBOS
  processes doing the same, their queues set as tether's (``bench/cluster.py``);
- the web app: a plain uvicorn app with no framework (``bench/web.py``);
- documents: python-pptx and WeasyPrint used plainly (``bench/artifacts.py``);
- reading a URL: plain ``httpx.get`` and the same extraction, without the guard; a Chinese page: an
  English page of the same size (``bench/research.py``);
- the system prompt with 50 installed skills: the same with 1, and with every body inlined;
- dialogue memory: recall@5 and MRR on a labelled bilingual set, a search at 100,000 turns next to one at
  1,000 (``bench/memory.py``); the decider: precision and recall on labelled signals, a decision next
  to one regular expression search (``bench/decider.py``).

Throughput at 8 concurrent tasks and the files an execution leaves have absolute goals, no floor. A row
that misses its goal says why under it: the measured cause, and what would have to change (the reasons
live beside the goals, ``bench/goals.py``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

from bench import goals  # noqa: E402
from bench.floors import INTERRUPT, KILL, ForkFloor  # noqa: E402
from bench.paired import Cpu, paired, row, why_not  # noqa: E402
from bench.registry import noop, registry  # noqa: E402
from tether.config import Settings  # noqa: E402
from tether.execution import process  # noqa: E402
from tether.execution.executor import Executor  # noqa: E402
from tether.execution.protocol import ExecutionPaths, read_exit  # noqa: E402
from tether.tasks.result import TaskStatus  # noqa: E402

THROUGHPUT_TASKS = 96
FILES_RUNS = 5
REAPED_WITHIN_S = 5.0
WHOLE_ROUND = " (CPU: the whole round, start and stop)"
GRACE = Settings(stop_grace_cooperative_s=0.3, stop_grace_interrupt_s=0.3, stop_grace_kill_s=2.0)


def warm_executor(home: Path) -> None:
    floor = ForkFloor()
    loop = asyncio.new_event_loop()
    sent: dict[str, float] = {}

    def stamped(action: object, name: str) -> object:
        def send(ref: process.ProcessRef) -> object:
            sent.setdefault(name, time.perf_counter())
            return action(ref)  # type: ignore[operator]

        return send

    # Ours counts this process and its executor's fork server and workers; the floor this process and
    # the floor's fork server and children. Each leaves out the other's server.
    cpu = (
        Cpu.tree("this process + fork server tree (psutil)", exclude=lambda: [floor.proc.pid]),
        Cpu("this process + floor's fork server tree (psutil)", roots=lambda: [floor.proc.pid]),
    )
    # The moment each stop step's signal goes out: a step is timed from there to stop() returning.
    process.interrupt = stamped(process.interrupt, "interrupt")  # type: ignore[assignment]
    process.kill_tree = stamped(process.kill_tree, "kill")  # type: ignore[assignment]
    try:
        with Executor(registry, home=home, settings=GRACE) as ex:
            ex.warm_up()
            _ok(ex.execute_sync("b.sync", caller="cli"))  # the first fork pays for the server's preload

            print("\nwarm executor (fork server up, store open)")

            def inline() -> None:
                _ok(loop.run_until_complete(ex.execute("b.inline", caller="cli")))

            def direct() -> None:
                noop(cast(Any, None))  # the handler alone: it does not touch its context

            row("await execute(inline task)", paired(inline, direct, 200), "the handler called directly")

            def sync() -> None:
                _ok(loop.run_until_complete(ex.execute("b.sync", caller="cli")))

            row("await execute(sync task), own process", paired(sync, floor.publish, 40, cpu=cpu),
                "a preloaded fork that publishes one file", goals.PROCESS_TASK)  # fmt: skip
            _where_cpu_goes(ex, loop, floor)
            _throughput(ex, loop, cpu[0])
            _files_per_execution(ex, loop, home)

            print("\nstop steps, from the step's signal until stop() returns with the job on record")

            def stop(task_id: str, step: str) -> float:
                job = ex.execute_sync(task_id, caller="cli")
                assert job.status is TaskStatus.RUNNING, job
                sent.clear()
                result = loop.run_until_complete(ex.jobs.stop(job.execution_id))
                elapsed = time.perf_counter() - sent[step]
                assert result.data.get("stop_step") == step, result
                return elapsed

            # Wall is from the signal to the exit; CPU is the whole round, the start included.
            row("interrupt step (SIGINT)", paired(lambda: stop("b.deaf", "interrupt"),
                lambda: floor.signalled(INTERRUPT), 12, cpu=cpu),
                f"a forked child, SIGINT to its exit{WHOLE_ROUND}", goals.STOP_INTERRUPT)  # fmt: skip
            row("kill step (SIGKILL)", paired(lambda: stop("b.hung", "kill"),
                lambda: floor.signalled(KILL), 12, cpu=cpu),
                f"a forked child, SIGKILL to its exit{WHOLE_ROUND}", goals.STOP_KILL)  # fmt: skip
            _loop_lag(ex, loop)
    finally:
        loop.close()
        floor.close()


def _where_cpu_goes(ex: Executor, loop: asyncio.AbstractEventLoop, floor: ForkFloor) -> None:
    """The sync task's CPU by process, next to the floor's: what the goal's ratio is made of."""
    import psutil

    def own(proc: psutil.Process) -> tuple[float, float]:
        times = proc.cpu_times()  # the server itself; the children it reaped (the workers)
        return times.user + times.system, times.children_user + times.children_system

    me = psutil.Process()
    server = next(p for p in me.children() if p.pid != floor.proc.pid)
    floor_server = psutil.Process(floor.proc.pid)
    rounds = 100
    here, (srv, kids) = me.cpu_times(), own(server)
    ids = []
    for _ in range(rounds):
        result = loop.run_until_complete(ex.execute("b.sync", caller="cli"))
        _ok(result)
        ids.append(result.execution_id)
    _reaped(lambda: read_exit(ExecutionPaths.of(ex.home, ids[-1])) is not None)
    after, (srv2, kids2) = me.cpu_times(), own(server)
    mine = (after.user + after.system - here.user - here.system) / rounds * 1000
    f_srv, f_kids = own(floor_server)
    for _ in range(rounds):
        floor.publish()
    _reaped(lambda: not floor_server.children())  # its last child's CPU counts once it is reaped
    f_srv2, f_kids2 = own(floor_server)
    print(
        f"  {'':<44} where one task's CPU goes: executor {mine:.2f} ms, fork server"
        f" {(srv2 - srv) / rounds * 1000:.2f} ms, worker {(kids2 - kids) / rounds * 1000:.2f} ms;"
        f" the floor's server {(f_srv2 - f_srv) / rounds * 1000:.2f} ms, its child"
        f" {(f_kids2 - f_kids) / rounds * 1000:.2f} ms"
    )


def _reaped(done: Callable[[], bool]) -> None:
    """Until ``done`` (a worker reaped, its CPU then counted in its parent's), within ``REAPED_WITHIN_S``."""
    deadline = time.monotonic() + REAPED_WITHIN_S
    while not done() and time.monotonic() < deadline:
        time.sleep(0.001)


def _throughput(ex: Executor, loop: asyncio.AbstractEventLoop, cpu: Cpu) -> None:
    """``THROUGHPUT_TASKS`` process tasks through one executor, ``THROUGHPUT_CONCURRENCY`` at a time."""
    gate = asyncio.Semaphore(goals.THROUGHPUT_CONCURRENCY)

    async def one() -> None:
        async with gate:
            _ok(await ex.execute("b.sync", caller="cli"))

    async def all_of_them() -> None:
        await asyncio.gather(*(one() for _ in range(THROUGHPUT_TASKS)))

    cpu_start = cpu.sample(before=True)
    start = time.perf_counter()
    loop.run_until_complete(all_of_them())
    wall = time.perf_counter() - start
    cpu_ms = (cpu.sample(before=False) - cpu_start) / THROUGHPUT_TASKS * 1000
    rate = THROUGHPUT_TASKS / wall
    met = rate >= goals.THROUGHPUT_TASKS_S and cpu_ms <= goals.THROUGHPUT_CPU_MS
    print(
        f"  {THROUGHPUT_TASKS} sync tasks, {goals.THROUGHPUT_CONCURRENCY} at a time   {rate:9.1f} tasks/s"
        f"   CPU {cpu_ms:7.2f} ms/task   goal ≥ {goals.THROUGHPUT_TASKS_S:g} tasks/s and"
        f" ≤ {goals.THROUGHPUT_CPU_MS:g} ms CPU/task: {'met' if met else 'not met'}"
    )
    print(f"  {'':<44} paired with: nothing (an absolute goal); CPU of {cpu.label}")
    if not met:
        why_not(goals.THROUGHPUT_WHY)


def _files_per_execution(ex: Executor, loop: asyncio.AbstractEventLoop, home: Path) -> None:
    """What a finished execution leaves in its folder (``executions/<id>``): files and bytes."""
    counts: list[int] = []
    sizes: list[int] = []
    names: set[str] = set()
    for _ in range(FILES_RUNS):
        result = loop.run_until_complete(ex.execute("b.sync", caller="cli"))
        _ok(result)
        paths = ExecutionPaths.of(home, result.execution_id)
        _reaped(lambda paths=paths: read_exit(paths) is not None)  # what it leaves, once reaped
        folder = paths.dir
        files = list(folder.rglob("*")) if folder.exists() else []  # every entry: the doorbell counts
        counts.append(len(files))
        names.update(p.name for p in files)
        sizes.append(sum(p.lstat().st_size for p in files))
    files, size = max(counts), max(sizes)
    met = files <= goals.FILES_PER_EXECUTION and size <= goals.LIVE_BYTES_PER_EXECUTION
    print(
        f"  files an execution leaves (sync task, worst of {FILES_RUNS})   {files} files, {size:,} B"
        f"   goal ≤ {goals.FILES_PER_EXECUTION} files and ≤ {goals.LIVE_BYTES_PER_EXECUTION:,} B:"
        f" {'met' if met else 'not met'}"
    )
    where = ", ".join(sorted(names))
    print(f"  {'':<44} paired with: nothing (an absolute goal); in executions/<id>: {where}")


def _loop_lag(ex: Executor, loop: asyncio.AbstractEventLoop) -> None:
    """The worst lateness of a 10 ms ticker while the loop stops a hung job (the kill step)."""
    worst = 0.0

    async def scenario() -> None:
        nonlocal worst
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal worst
            while not done.is_set():
                before = time.monotonic()
                await asyncio.sleep(0.01)
                worst = max(worst, time.monotonic() - before - 0.01)

        ticking = asyncio.create_task(ticker())
        job = await ex.execute("b.hung", caller="cli")
        await ex.jobs.stop(job.execution_id)
        done.set()
        await ticking

    loop.run_until_complete(scenario())
    print(f"  event loop: worst lateness of a 10 ms timer while stopping a hung job: {worst * 1000:.1f} ms")


def _ok(result: object) -> None:
    assert getattr(result, "status", None) is TaskStatus.COMPLETED, result


def main(argv: list[str] | None = None) -> int:
    """``python -m bench`` runs every section; ``python -m bench cli warm`` only those named; ``--small``
    makes the flows smaller."""
    from bench.agent import loop_overhead, prompt_sizes, skill_prompt_sizes
    from bench.cli import cli_startup
    from bench.turns import delegation, per_turn

    def flows(home: Path) -> None:
        from bench.flows import flows as run_flows  # imports DBOS: only when this section runs

        run_flows(home)

    def web(home: Path) -> None:
        from bench.web import web as run_web  # starts servers and a browser: only when this section runs

        run_web(home)

    def artifacts(home: Path) -> None:
        from bench.artifacts import artifacts as run_artifacts  # loads python-pptx and WeasyPrint

        run_artifacts(home)

    def research(home: Path) -> None:
        from bench.research import research as run_research  # serves pages on 127.0.0.1

        run_research(home)

    def memory(home: Path) -> None:
        from bench.memory import memory as run_memory  # reads the labelled set; builds 100,000 turns

        run_memory(home)

    def idle(home: Path) -> None:
        from bench.idle import idle as run_idle  # starts an executor and plain DBOS processes

        run_idle(home)

    def cluster(home: Path) -> None:
        from bench.cluster import cluster as run_cluster  # starts workers and plain DBOS processes

        run_cluster(home)

    def decider(home: Path) -> None:
        from bench.decider import decider as run_decider  # reads the labelled signals

        run_decider(home)

    sections = {
        "cli": cli_startup,
        "warm": warm_executor,
        "turns": per_turn,
        "team": delegation,
        "prompts": prompt_sizes,
        "loop": loop_overhead,
        "flows": flows,
        "idle": idle,
        "cluster": cluster,
        "web": web,
        "artifacts": artifacts,
        "research": research,
        "skills": skill_prompt_sizes,
        "memory": memory,
        "decider": decider,
        "offline": lambda home: __import__("bench.offline", fromlist=["run"]).run(home),  # issue 23
    }
    chosen = sys.argv[1:] if argv is None else argv
    if "--small" in chosen:  # smaller flows, to prove the rows work; the figures are the full run's
        chosen = [name for name in chosen if name != "--small"]
        os.environ["TETHER_BENCH_SMALL"] = "1"
    chosen = chosen or list(sections)
    unknown = [name for name in chosen if name not in sections]
    if unknown:
        print(f"unknown section(s) {', '.join(unknown)}; sections: {', '.join(sections)}", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    print(f"tether bench · {os.cpu_count()} cores · home {home}")
    print("(each row: wall, ours / floor medians = the median of the paired ratios; CPU, ours / floor per")
    print(" call = the ratio of the totals; the verdict on the goal's own metric)")
    for name in chosen:
        sections[name](home / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
