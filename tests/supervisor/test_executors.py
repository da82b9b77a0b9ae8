"""Executors cover for each other: while any executor of a home lives, a dead one's work is picked up
within seconds, and a run whose segment nobody holds is never left ``running`` forever.

``tether serve`` beside a ``tether worker``, or two ``tether goal`` commands at once, make several
executors ordinary. A dead executor's slot was recovered only when an executor *launched*: with two
workers, SIGKILL the one that held a flow's segment and the run stayed ``running`` forever."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.support.flowkit import ledger
from tests.support.helpers import ROOT, tether_cli, wait_for
from tests.support.workers import FLOWS, Worker, worker_env

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _segment_executor(home: Path, run_id: str) -> str | None:
    """The executor id a run's current segment is pending under, read through DBOS's client."""
    from tether.runtime import Runtime
    from tether.supervisor import durable

    with Runtime.open(home) as runtime:
        run = runtime.runs.get(run_id)
        assert run is not None
        with durable.client(runtime) as client:
            found = client.list_workflows(workflow_ids=[durable.segment_id(run_id, run.segment)])
    return found[0].executor_id if found and found[0].status == "PENDING" else None


def _ended(home: Path, run_id: str) -> dict[str, Any] | None:
    """The run as `flow show --json` prints it, once it is no longer running."""
    _, shown, _ = tether_cli("--registry", FLOWS, "flow", "show", run_id, "--json", home=home)
    run = json.loads(shown)
    return run if run["status"] != "running" else None


def _flow(tmp_path: Path, tasks: int, seconds: float, *, held_until: str | None = None) -> Path:
    """A chain of ``tasks`` must-run-once steps of ``seconds`` each; with ``held_until``, the first one
    also holds on until the test makes that file in the home (the run is surely not done before)."""
    steps: list[dict[str, Any]] = []
    for n in range(tasks):
        args: dict[str, Any] = {"key": f"k{n}", "seconds": seconds}
        if n == 0 and held_until is not None:
            args["until_file"] = held_until
        step: dict[str, Any] = {"id": f"t{n}", "call": {"task": "f.once", "args": args}}
        if n:
            step["depends_on"] = [f"t{n - 1}"]
        steps.append(step)
    flow = tmp_path / "long.yaml"
    flow.write_text(yaml.safe_dump({"caller": "cli", "tasks": steps}))
    return flow


def test_a_live_executor_takes_over_the_run_of_one_killed_beside_it(
    home: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    workers += [Worker(home), Worker(home)]
    code, out, err = tether_cli(
        "--registry", FLOWS, "flow", "run", str(_flow(tmp_path, 8, 0.4)), "--detach", "--json", home=home
    )
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    holder = wait_for(lambda: _segment_executor(home, run_id), timeout=60, what="an executor to take the run")
    victim = next(w for w in workers if w.executor_id == holder)
    victim.kill()
    # The other executor notices the dead slot by itself: no executor starts, nobody resumes the run.
    run = wait_for(
        lambda: _ended(home, run_id), timeout=120, what="the run to end with the executor left alive"
    )
    assert run["status"] == "completed", run
    effects = Counter(str(m["key"]) for m in ledger(home))
    assert all(effects[f"k{n}"] == 1 for n in range(8)), effects


def test_resume_of_a_run_whose_executor_died_says_so_and_drives_it(
    home: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    """`tether flow resume` answered "it is pending already" and followed forever."""
    workers.append(Worker(home))
    code, out, err = tether_cli(
        "--registry", FLOWS, "flow", "run", str(_flow(tmp_path, 6, 0.3)), "--detach", "--json", home=home
    )
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    wait_for(lambda: _segment_executor(home, run_id), timeout=60, what="the executor to take the run")
    workers[0].kill()  # the only executor: nobody watches
    code, out, err = tether_cli("--registry", FLOWS, "flow", "resume", run_id, home=home, timeout=180)
    assert code == 0, (out, err)
    assert "died" in out and "completed" in out, out
    effects = Counter(str(m["key"]) for m in ledger(home))
    assert all(effects[f"k{n}"] == 1 for n in range(6)), effects


# -- runs that want a busy resource wait their turn ------------------------------------------------


def test_runs_that_want_a_busy_resource_wait_their_turn_in_order_never_for_a_person(
    home: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    """Five goals at once that all needed the game: 13 of 20 ended waiting_for_human at their first task
    (a lock refusal was taken for any refusal). The lock held; a busy resource is not a failure."""
    workers.append(Worker(home))

    def start(n: int, **args: Any) -> str:
        flow = tmp_path / f"arm{n}.yaml"
        flow.write_text(yaml.safe_dump({"caller": "cli", "tasks": [
            {"id": "move", "call": {"task": "f.arm", "args": {"key": f"arm{n}", "seconds": 0.3, **args}}},
        ]}))  # fmt: skip
        code, out, err = tether_cli(
            "--registry", FLOWS, "flow", "run", str(flow), "--detach", "--json", home=home
        )
        assert code == 0, err
        return str(json.loads(out)["run_id"])

    def shown(run_id: str) -> dict[str, Any]:
        _, out, _ = tether_cli("--registry", FLOWS, "flow", "show", run_id, "--json", home=home)
        return json.loads(out)

    def waiting_since(run: dict[str, Any]) -> float | None:
        since = (run["tasks"][0]["overrides"].get("stage") or {}).get("waiting_since")
        return None if since is None else float(since)

    # arm0 holds the arm until the test lets go; the four others ask for it meanwhile, and wait.
    runs = [start(0, until_file="release")]

    def holding() -> bool:  # its worker publishes running once it holds the arm's lock
        _, out, _ = tether_cli("--registry", FLOWS, "job", "list", "--active", "--json", home=home)
        return any(j["task_id"] == "f.arm" and j["status"] == "running" for j in json.loads(out or "[]"))

    wait_for(holding, timeout=60, what="arm0 to hold the arm")
    runs += [start(n) for n in range(1, 5)]
    wait_for(
        lambda: all(waiting_since(shown(r)) is not None for r in runs[1:]),
        timeout=120, what="the four others to wait for the arm",
    )  # fmt: skip
    (home / "release").write_text("")
    ended = wait_for(
        lambda: all(shown(r)["status"] != "running" for r in runs) and [shown(r) for r in runs],
        timeout=180, what="the five runs to end",
    )  # fmt: skip
    statuses = [r["status"] for r in ended]
    assert statuses == ["completed"] * 5, [(r["status"], r["tasks"][0]["message"]) for r in ended]
    moves = sorted(ledger(home), key=lambda m: m["began"])
    for first, second in itertools.pairwise(moves):
        assert first["ended"] <= second["began"], "two moves of the one arm overlapped"
    # First asked, first served: the four got the arm in the order they first asked for it (which need
    # not be the order they were started: a later run's segment may reach the arm first).
    asked = {f"arm{n}": waiting_since(r) or 0.0 for n, r in enumerate(ended) if n}
    order = [m["key"] for m in moves]
    assert order[0] == "arm0" and order[1:] == sorted(asked, key=asked.__getitem__), (order, asked)


def test_a_command_that_became_the_executor_hands_on_what_it_took_for_others(
    home: Path, tmp_path: Path
) -> None:
    """A `tether flow run` with no executor around becomes the home's executor and dequeues whatever is
    queued, other runs' segments too. It left when its own run ended, and (DBOS destroyed with no grace)
    the other run stayed `running` with nobody to execute it until some command launched again."""
    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump({"caller": "cli", "tasks": [
        {"id": "mine", "call": {"task": "f.safe", "args": {"key": "mine", "seconds": 60}}},
    ]}))  # fmt: skip
    following = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "flow", "run", str(own),
         "--json"],
        env=worker_env(home), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        from tether.supervisor import durable

        wait_for(lambda: durable.live_executors(home), timeout=60, what="the command to become the executor")
        code, out, err = tether_cli(
            "--registry", FLOWS, "flow", "run", str(_flow(tmp_path, 5, 0.2, held_until="go")), "--detach",
            "--json", home=home,
        )  # fmt: skip
        assert code == 0, err
        other = json.loads(out)["run_id"]
        taken = wait_for(lambda: _segment_executor(home, other), timeout=60, what="the executor to take it")
        assert taken.endswith("/slot-0"), taken  # the command's: nobody else is an executor here
        # Its own run ends (cancelled), so the command leaves, holding the other run's segment.
        _, listed, _ = tether_cli("--registry", FLOWS, "flow", "list", "--json", home=home)
        mine = next(r["run_id"] for r in json.loads(listed) if r["run_id"] != other)
        code, out, err = tether_cli("--registry", FLOWS, "flow", "cancel", mine, home=home)
        assert code == 0, (out, err)
        done, errors = following.communicate(timeout=120)
        assert json.loads(done)["status"] == "cancelled", (done, errors)
        _, shown, _ = tether_cli("--registry", FLOWS, "flow", "show", other, "--json", home=home)
        assert json.loads(shown)["status"] == "running"  # its first step holds on until the test lets go
        (home / "go").touch()

        run = wait_for(
            lambda: _ended(home, other), timeout=120, what="the other run to end with nobody resuming it"
        )
        assert run["status"] == "completed", run
        effects = Counter(str(m["key"]) for m in ledger(home))
        assert all(effects[f"k{n}"] == 1 for n in range(5)), effects
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(following.pid, signal.SIGKILL)
        following.communicate(timeout=30)  # reaped, its pipes closed
        for proc in psutil.process_iter(["cmdline"]):  # the background worker, if it is still idling
            command = proc.info["cmdline"] or []
            if "--until-idle" in command and str(home) in command:
                with contextlib.suppress(psutil.Error):
                    proc.kill()


def test_a_command_following_a_run_nobody_executes_says_so_and_gets_it_executed(
    home: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    """`tether goal` / `flow run` beside a live executor only follow the record. A run whose segment
    ended while the run is on record as running (DBOS gave up on it, or it was cancelled outside
    tether) was followed forever, in silence: the live executors never look at it again."""
    workers.append(Worker(home))
    following = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "flow", "run",
         str(_flow(tmp_path, 3, 0.2, held_until="go")), "--json"],
        env=worker_env(home), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        from tether.runtime import Runtime
        from tether.supervisor import durable

        def taken() -> str | None:
            _, listed, _ = tether_cli("--registry", FLOWS, "flow", "list", "--json", home=home)
            runs = json.loads(listed)
            return runs[0]["run_id"] if runs and _segment_executor(home, runs[0]["run_id"]) else None

        run_id = wait_for(taken, timeout=60, what="the worker to take the run")
        with Runtime.open(home) as runtime, durable.client(runtime) as client:
            client.cancel_workflow(durable.segment_id(run_id, 0))  # nothing of tether's knows
        (home / "go").touch()  # the step it was running may end now
        done, said = following.communicate(timeout=180)
        assert following.returncode == 0, (done, said)
        assert "nothing was executing it" in said.decode(), said
        assert json.loads(done)["status"] == "completed"
        effects = Counter(str(m["key"]) for m in ledger(home))
        assert all(effects[f"k{n}"] == 1 for n in range(3)), effects
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(following.pid, signal.SIGKILL)
        following.communicate(timeout=30)  # reaped, its pipes closed
