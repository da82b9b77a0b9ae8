"""Executors killed among live ones: two to four ``tether worker``s share a home and its queue, runs keep
arriving (chains of must-run-once steps, idempotent steps run inline, and moves of the one arm that every
run wants), and the test SIGKILLs one executor after another at random moments, starting new ones so two
to four stay alive.

Nobody resumes anything: what a dead executor held, the live ones take over by themselves. Counted and
printed at the end of the session: kills, runs stranded ``running`` (0), steps run twice (0), runs sent
to a person (0; a busy arm is a wait, not a failure), and two moves of the arm at once (0).

The default run lands 30 kills on SQLite and 20 on PostgreSQL; ``TETHER_EXECUTOR_KILLS=N`` lands N on
SQLite (and two thirds of N on PostgreSQL), ``TETHER_EXECUTOR_SEED`` replays a storm.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import pg_home
from tests.support.figures import count as record_figure
from tests.support.flowkit import ledger
from tests.support.helpers import ROOT, wait_for
from tether.runtime import Runtime
from tether.store.runs import RunRecord
from tether.supervisor import durable, service
from tether.supervisor.plan import Plan

FLOWS = "tests.support.flowkit:flows"
KILLS = int(os.environ.get("TETHER_EXECUTOR_KILLS", "30"))
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


class Executor:
    """A ``tether worker`` of the home (started, not waited for: a kill may land while it launches)."""

    def __init__(self, home: Path, extra: dict[str, str], number: int) -> None:
        self.said = home.parent / f"executor-{number}.out"  # where it announces its executor id
        env = {
            **os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0",
            "TETHER_STOP_GRACE_COOPERATIVE_S": "0.5", "TETHER_STOP_GRACE_INTERRUPT_S": "0.5", **extra,
        }  # fmt: skip
        with self.said.open("wb") as said:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "worker"],
                env=env, cwd=ROOT, stdout=said, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.started = time.monotonic()

    @property
    def executor_id(self) -> str | None:
        """Its executor id, once it has launched."""
        found = re.search(r"executor (\S+) runs", self.said.read_text(errors="replace"))
        return found.group(1) if found else None

    def kill(self) -> bool:
        """SIGKILL the executor only (the task workers it started are detached and live on); whether it
        was alive to be killed."""
        alive = self.proc.poll() is None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        return alive

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _plan(name: str, rng: random.Random) -> Plan:
    """A run of eight: two must-run-once steps, a move of the arm, two idempotent steps inline (in the
    executor's own process, inside its decision step: ids ``q…``), two more steps, another move."""
    kinds = ["f.once", "f.once", "f.arm", "f.inline_safe", "f.inline_safe", "f.once", "f.once", "f.arm"]
    tasks: list[dict[str, Any]] = []
    for n, task in enumerate(kinds):
        seconds = round(rng.uniform(0.05, 0.5 if task == "f.arm" else 0.3), 2)
        step_id = f"q{n}" if task == "f.inline_safe" else f"s{n}"
        args = {"key": f"{name}-{step_id}", "seconds": seconds}
        step: dict[str, Any] = {"id": step_id, "call": {"task": task, "args": args}}
        if tasks:
            step["depends_on"] = [tasks[-1]["id"]]
        tasks.append(step)
    return Plan.model_validate({"caller": "cli", "tasks": tasks})


def _run(runtime: Runtime, run_id: str) -> RunRecord:
    run = runtime.runs.get(run_id)
    assert run is not None
    return run


def _victim(client: Any, live: list[Executor], rng: random.Random) -> tuple[Executor, bool]:
    """Mostly an executor that holds work (a run's segment it dequeued); now and then any, one still
    launching included. Taken out of ``live``; whether it held work."""
    pending = client.list_workflows(status="PENDING", load_input=False, load_output=False)
    held = {w.executor_id for w in pending}
    holders = [e for e in live if e.executor_id in held]
    victim = rng.choice(holders if holders and rng.random() < 0.8 else live)
    live.remove(victim)
    return victim, victim.executor_id in held


def storm(home: Path, kills: int, extra: dict[str, str], seed: int) -> dict[str, int]:
    """Kill ``kills`` executors among two to four live ones while runs arrive; wait for every run to end
    with the survivors alone; the counts."""
    from tests.support.flowkit import flows

    rng = random.Random(seed)
    live: list[Executor] = []
    started: dict[str, str] = {}  # run id: its name (its ledger keys are <name>-<task>)
    landed = holding = 0
    spawned = itertools.count()
    with Runtime.open(home, environ={**os.environ, **extra}) as runtime, durable.client(runtime) as client:
        try:
            live += [Executor(home, extra, next(spawned)), Executor(home, extra, next(spawned))]
            while landed < kills:
                running = [r for r in runtime.runs.active() if r.status == "running"]
                for _ in range(4 - len(running)):  # work keeps arriving: four runs at once want the arm
                    name = f"r{len(started)}"
                    started[service.start(runtime, flows, _plan(name, rng)).run_id] = name
                while len(live) < 2 or (len(live) < 4 and rng.random() < 0.3):  # two to four at a kill
                    live.append(Executor(home, extra, next(spawned)))
                time.sleep(rng.uniform(0.3, 1.5))
                victim, was_holding = _victim(client, live, rng)
                if victim.kill():
                    landed += 1
                    holding += was_holding
                # No new executor until the next round: the survivors' watches pick up the victim's work.
            # The last kill, of an executor holding a run's segment among launched ones, starts none: what
            # it held, only a survivor's watch can take over.
            while len(live) < 2:
                live.append(Executor(home, extra, next(spawned)))
            for _ in range(4):
                name = f"r{len(started)}"
                started[service.start(runtime, flows, _plan(name, rng)).run_id] = name
            wait_for(lambda: all(e.executor_id for e in live), timeout=60, what="the executors to launch")

            def holder() -> Executor | None:
                pending = client.list_workflows(status="PENDING", load_input=False, load_output=False)
                held = {w.executor_id for w in pending}
                return next((e for e in live if e.executor_id in held), None)

            last = wait_for(holder, timeout=60, what="an executor to take a run")
            live.remove(last)
            landed += last.kill()
            holding += 1
            # The storm is over: the survivors finish every run by themselves (nobody resumes anything).
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if all(_run(runtime, run_id).status != "running" for run_id in started):
                    break
                time.sleep(0.5)
            runs = [{**service.run_document(_run(runtime, r)), "name": n} for r, n in started.items()]
        finally:
            for executor in live:
                executor.close()
    return {**count(home, runs, landed, seed), "kills of a holder": holding}


def count(home: Path, runs: list[dict[str, Any]], landed: int, seed: int) -> dict[str, int]:
    effects = Counter(str(m["key"]) for m in ledger(home))
    moves = sorted((m for m in ledger(home) if m["task"] == "f.arm"), key=lambda m: m["began"])
    people = [
        (r["run_id"], t["id"], t["message"], (t["review"] or {}).get("kind"))
        for r in runs for t in r["tasks"] if t["status"] == "waiting_for_human"
    ]  # fmt: skip
    figures = {
        "kills": landed,
        "runs": len(runs),
        "stranded": sum(r["status"] == "running" for r in runs),
        "twice": sum(n > 1 for k, n in effects.items() if not _idempotent(k)),
        "to a person": len(people),
        "to a person for a busy resource": sum(kind == "busy" for _, _, _, kind in people),
        "overlapping moves": sum(a["ended"] > b["began"] for a, b in itertools.pairwise(moves)),
        "not completed": sum(r["status"] != "completed" for r in runs),
    }
    detail = {
        "seed": seed,
        "figures": figures,
        "twice": [k for k, n in effects.items() if n > 1 and not _idempotent(k)],
        "people": people[:5],
        "stranded": [(r["run_id"], [(t["id"], t["status"]) for t in r["tasks"]]) for r in runs
                     if r["status"] == "running"][:3],
        "not completed": [(r["run_id"], r["status"], r["message"]) for r in runs
                          if r["status"] != "completed"][:5],
    }  # fmt: skip
    said = json.dumps(detail, default=str, ensure_ascii=False)  # whole: pytest clips a dict
    assert figures["stranded"] == 0, said
    assert figures["twice"] == 0, said
    assert figures["to a person"] == 0, said
    assert figures["overlapping moves"] == 0, said
    assert figures["not completed"] == 0, said
    # Every step of every completed run acted exactly once (an idempotent one, at least once: killed
    # between its effect and its end, it may run again, as it is allowed to).
    for run in runs:
        for task in run["tasks"]:
            key = f"{run['name']}-{task['id']}"
            acted = effects[key] >= 1 if _idempotent(key) else effects[key] == 1
            assert acted, (run["run_id"], key, effects[key], said)
    return figures


def _idempotent(key: str) -> bool:
    return key.rsplit("-", 1)[-1].startswith("q")


def _record(figures: dict[str, int], database: str) -> None:
    record_figure(f"executor kills among 2-4 live executors ({database})", figures["kills"])
    record_figure(
        f"executor kills that hit one holding a run's segment ({database})", figures["kills of a holder"]
    )
    record_figure(f"runs under executor kills, all completed ({database})", figures["runs"])
    record_figure(f"runs stranded running ({database})", figures["stranded"])
    record_figure(f"steps run twice under executor kills ({database})", figures["twice"])
    record_figure(
        f"runs sent to a person for a busy resource ({database})", figures["to a person for a busy resource"]
    )


def test_executors_killed_among_live_ones_strand_nothing_on_sqlite(home: Path) -> None:
    seed = int(os.environ.get("TETHER_EXECUTOR_SEED", str(random.randrange(1 << 30))))
    _record(storm(home, KILLS, {}, seed), "SQLite")


def test_executors_killed_among_live_ones_strand_nothing_on_postgresql(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pg_home(home) as extra:
        monkeypatch.setenv(
            "TETHER_API_KEY_DATABASE", extra["TETHER_API_KEY_DATABASE"]
        )  # this process's store
        seed = int(os.environ.get("TETHER_EXECUTOR_SEED", str(random.randrange(1 << 30))))
        _record(storm(home, max(3, KILLS * 2 // 3), extra, seed), "PostgreSQL")
