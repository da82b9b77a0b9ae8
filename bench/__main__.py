"""``make bench``: the execution core's costs, each next to its peer, as ratios.

- execute() of an inline task vs calling the handler directly;
- a sync task in a fresh worker process (fork server, and a fresh interpreter) vs ``python -c pass``;
- the background start handshake;
- stop latency of each escalation step, beyond its configured grace period.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

from bench.registry import noop, registry  # noqa: E402
from tether.config import Settings  # noqa: E402
from tether.execution.executor import Executor  # noqa: E402
from tether.execution.spawner import SubprocessSpawner  # noqa: E402
from tether.tasks.result import TaskStatus  # noqa: E402

GRACE = Settings(stop_grace_cooperative_s=0.3, stop_grace_interrupt_s=0.3, stop_grace_kill_s=2.0)


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def row(name: str, ours: float, peer_name: str, peer: float) -> None:
    print(f"  {name:<44} {ours:9.3f} ms   {peer_name:<26} {peer:9.3f} ms   ratio {ours / peer:7.2f}x")


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    print(f"tether bench · {os.cpu_count()} cores · home {home}")
    with Executor(registry, home=home, settings=GRACE) as ex:
        ex.warm_up()
        ex.execute_sync("b.sync", caller="cli")  # first fork pays for the server's preload

        print("\nper call")
        direct = timed(lambda: noop(None), 2000)  # type: ignore[arg-type]
        inline = timed(lambda: ex.execute_sync("b.inline", caller="cli"), 300)
        row(
            "execute(inline task) incl. asyncio.run",
            median_ms(inline),
            "handler called directly",
            median_ms(direct),
        )

        async def inline_many(n: int) -> list[float]:
            samples = []
            for _ in range(n):
                start = time.perf_counter()
                await ex.execute("b.inline", caller="cli")
                samples.append(time.perf_counter() - start)
            return samples

        awaited = asyncio.run(inline_many(300))
        row("await execute(inline task)", median_ms(awaited), "handler called directly", median_ms(direct))

        print("\nfresh worker process, end to end (sync task)")
        pass_ = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 30)
        forked = timed(lambda: _ok(ex.execute_sync("b.sync", caller="cli")), 30)
        row("sync task, fork server", median_ms(forked), "python -c pass", median_ms(pass_))
        with Executor(registry, home=home, settings=GRACE, spawner=SubprocessSpawner()) as plain:
            fresh = timed(lambda: _ok(plain.execute_sync("b.sync", caller="cli")), 15)
        row("sync task, fresh interpreter", median_ms(fresh), "python -c pass", median_ms(pass_))

        print("\nbackground start handshake (execute() until running)")
        handshakes, stops = [], {"cooperative": [], "interrupt": [], "kill": []}
        for _ in range(10):
            start = time.perf_counter()
            job = ex.execute_sync("b.background", caller="cli")
            handshakes.append(time.perf_counter() - start)
            assert job.status is TaskStatus.RUNNING, job
            stops["cooperative"].append(_stop(ex, job.execution_id, "cooperative"))
        row("background handshake", median_ms(handshakes), "python -c pass", median_ms(pass_))

        print("\nstop latency beyond the grace periods it had to wait out")
        for _ in range(5):
            job = ex.execute_sync("b.deaf", caller="cli")
            stops["interrupt"].append(
                _stop(ex, job.execution_id, "interrupt") - GRACE.stop_grace_cooperative_s
            )
            job = ex.execute_sync("b.hung", caller="cli")
            stops["kill"].append(
                _stop(ex, job.execution_id, "kill")
                - GRACE.stop_grace_cooperative_s
                - GRACE.stop_grace_interrupt_s
            )
        for step, samples in stops.items():
            row(f"stop, {step} step", median_ms(samples), "python -c pass", median_ms(pass_))

    from bench.agent import loop_overhead, prompt_sizes

    prompt_sizes(home)
    loop_overhead(home)
    return 0


def _ok(result: object) -> None:
    assert getattr(result, "status", None) is TaskStatus.COMPLETED, result


def _stop(ex: Executor, execution_id: str, expected: str) -> float:
    start = time.perf_counter()
    result = asyncio.run(ex.jobs.stop(execution_id))
    elapsed = time.perf_counter() - start
    assert result.data.get("stop_step") == expected, result
    return elapsed


if __name__ == "__main__":
    sys.exit(main())
