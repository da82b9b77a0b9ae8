"""A run's inline tasks run inside its decision step (``engine.advance``), with real processes and kills.

An inline task needs no DBOS step of its own: its attempt goes on record with its job's claim, before
the handler runs, and ends with its job's end, in the same transactions. What must hold: no step per
task, and a crash at any point costs nothing silently — an ended task never runs again, a task cut
mid-run is ``unknown`` (a person decides) unless it is idempotent (it runs again).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.flowkit import ledger
from tests.support.helpers import ROOT, tether_cli, wait_for
from tether.runtime import Runtime

FLOWS = "tests.support.flowkit:flows"
pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
ENV = {"TETHER_CLI_SERVER": "0"}


def _flow(tmp_path: Path, tasks: list[dict[str, Any]]) -> Path:
    flow = tmp_path / "flow.yaml"
    flow.write_text(yaml.safe_dump({"caller": "cli", "tasks": tasks}))
    return flow


def _chain(task: str, prefix: str, n: int, **args: Any) -> list[dict[str, Any]]:
    return [
        {"id": f"i{k}", "call": {"task": task, "args": {"key": f"{prefix}-i{k}", **args}}}
        | ({"depends_on": [f"i{k - 1}"]} if k else {})
        for k in range(n)
    ]


def _cli(home: Path, *args: str, **env: str) -> tuple[int, str, str]:
    return tether_cli("--registry", FLOWS, *args, home=home, env={**ENV, **env}, timeout=120)


def _only_run(home: Path) -> str:
    code, out, err = _cli(home, "flow", "list", "--json")
    assert code == 0, err
    (run_id,) = [r["run_id"] for r in json.loads(out)]
    return str(run_id)


def _show(home: Path, run_id: str) -> dict[str, Any]:
    code, out, err = _cli(home, "flow", "show", run_id, "--json")
    assert code == 0, err
    return dict(json.loads(out))


def _effects(home: Path) -> Counter[str]:
    return Counter(str(m["key"]) for m in ledger(home))


def test_a_run_of_inline_tasks_takes_no_step_per_task(home: Path, tmp_path: Path) -> None:
    flow = _flow(tmp_path, _chain("f.inline_once", "s", 6))
    code, out, err = _cli(home, "flow", "run", str(flow), "--json")
    assert code == 0, (out, err)
    run = _show(home, json.loads(out)["run_id"])
    assert run["status"] == "completed", run
    assert _effects(home) == {f"s-i{k}": 1 for k in range(6)}
    with sqlite3.connect(home / "dbos.sqlite") as db:
        steps = Counter(name for (name,) in db.execute("SELECT function_name FROM operation_outputs"))
    assert steps["tether.attempt"] == 0, steps  # no step of its own for any task
    assert steps["tether.advance"] == 1, steps  # one decision step ran all six, then the run's end


def _killed_after_the_first_end(home: Path, tmp_path: Path, task: str, prefix: str, n: int) -> dict[str, Any]:
    """A chain of ``n`` calls of ``task``, its executor SIGKILLed right after the first end committed,
    then resumed: the run (the first task's effect happened once before the kill, nothing after)."""
    flow = _flow(tmp_path, _chain(task, prefix, n))
    code, _, err = _cli(home, "flow", "run", str(flow), "--json", TETHER_FAULTS="inline.after_end=kill")
    assert code == -signal.SIGKILL, err
    assert _effects(home) == {f"{prefix}-i0": 1}
    run_id = _only_run(home)
    code, _, err = _cli(home, "flow", "resume", run_id)
    assert code == 0, err
    run = _show(home, run_id)
    assert run["status"] == "completed", run
    assert _effects(home) == {f"{prefix}-i{k}": 1 for k in range(n)}
    return run


def test_a_crash_after_an_inline_task_ended_never_runs_it_again(home: Path, tmp_path: Path) -> None:
    """Killed right after a task's end was committed (its job, its attempt and its task together): the
    re-run decision step finds it settled and goes on with the next."""
    run = _killed_after_the_first_end(home, tmp_path, "f.inline_once", "e", 3)
    assert [s["status"] for s in run["tasks"][0]["steps"]] == ["completed"]


def _cut_mid_run(home: Path, tmp_path: Path, task: str) -> tuple[int, dict[str, Any]]:
    """A run of one inline task, its executor SIGKILLed while the handler runs, then resumed: the
    resuming command's exit code, and the run."""
    flow = _flow(tmp_path, _chain(task, "m", 1, until_file="go"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "flow", "run", str(flow)],
        cwd=ROOT, env={**os.environ, "TETHER_HOME": str(home), **ENV}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with Runtime.open(home) as runtime:
            wait_for(lambda: runtime.jobs.list(active=True), what="the inline task to run")
    finally:
        proc.kill()
        proc.wait(timeout=60)
    (home / "go").touch()  # a handler started again would now finish
    run_id = _only_run(home)
    code, _, _ = _cli(home, "flow", "resume", run_id)
    return code, _show(home, run_id)


def test_an_inline_task_cut_mid_run_goes_to_a_person(home: Path, tmp_path: Path) -> None:
    """Found writing this test: a handler killed with its process was recorded a plain failure, and the
    failure chain ran a must-run-once task again at once. It may have acted: ``unknown``."""
    code, run = _cut_mid_run(home, tmp_path, "f.inline_once")
    (task,) = run["tasks"]
    assert (code, run["status"]) == (3, "waiting_for_human"), run
    assert task["review"]["kind"] == "unknown", task
    assert not _effects(home)  # it died before its effect, and was never run again


def test_an_idempotent_inline_task_cut_mid_run_runs_again(home: Path, tmp_path: Path) -> None:
    code, run = _cut_mid_run(home, tmp_path, "f.inline_safe")
    (task,) = run["tasks"]
    assert (code, run["status"]) == (0, "completed"), run
    assert [s["status"] for s in task["steps"]] == ["unknown", "completed"], task["steps"]
    assert _effects(home) == {"m-i0": 1}


def test_what_an_inline_task_prints_is_its_log_not_the_commands_output(home: Path) -> None:
    """Found writing these tests: an inline handler's print went into its caller's stdout, so the
    document of ``--json`` was broken. It goes to its job's log, as a worker's does."""
    code, out, err = _cli(home, "task", "run", "f.inline_once", "-p", "key=printed", "--json")
    assert code == 0, err
    result = json.loads(out)  # one document, nothing else
    assert result["status"] == "completed" and "working" not in out + err
    code, log, err = _cli(home, "job", "log", result["execution_id"])
    assert code == 0, err
    assert "printed: working" in log


# -- an idempotent call claimed with the end of the one before (eager.py) ---------------------------


def _run_of(home: Path, run_id: str) -> tuple[int, list[tuple[str, str]]]:
    """The run's revision (one per write of its tasks), and its jobs' events in the order written."""
    with sqlite3.connect(home / "tether.db") as db:
        (rev,) = db.execute("SELECT rev FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        rows = db.execute(
            "SELECT payload FROM events WHERE kind = 'job_state_changed' AND topic = ? ORDER BY id",
            (f"run:{run_id}",),
        ).fetchall()
    changes = [json.loads(p) for (p,) in rows]
    return int(rev), [(str(c["step_id"]).split("/")[1], str(c["status"])) for c in changes]


def test_an_idempotent_inline_task_is_claimed_with_the_end_of_the_one_before(
    home: Path, tmp_path: Path
) -> None:
    """A chain of must-run-once tasks takes a claim and an end a task; a chain of idempotent ones takes
    the claim of each with the end of the one before, so one write fewer a task after the first."""
    revs = {}
    for task, prefix in (("f.inline_once", "o"), ("f.inline_safe", "s")):
        code, out, err = _cli(home, "flow", "run", str(_flow(tmp_path, _chain(task, prefix, 6))), "--json")
        assert code == 0, (out, err)
        run_id = json.loads(out)["run_id"]
        assert _show(home, run_id)["status"] == "completed"
        revs[task], events = _run_of(home, run_id)
        # Each job's end is announced before the next job's start, whichever transaction wrote them.
        assert events == [(f"i{k}", s) for k in range(6) for s in ("running", "completed")], events
    assert revs["f.inline_once"] - revs["f.inline_safe"] == 5, revs
    assert _effects(home) == {f"{p}-i{k}": 1 for p in "os" for k in range(6)}


def test_a_crash_after_an_end_that_claimed_the_next_task_runs_that_task_again(
    home: Path, tmp_path: Path
) -> None:
    """Killed right after a task's end, which claimed the next (idempotent) task: that claim's handler
    may or may not have begun, for all recovery can tell. It is ``unknown``, and runs again: once, as
    it never began."""
    run = _killed_after_the_first_end(home, tmp_path, "f.inline_safe", "k", 3)
    steps = {t["id"]: [s["status"] for s in t["steps"]] for t in run["tasks"]}
    assert steps == {"i0": ["completed"], "i1": ["unknown", "completed"], "i2": ["completed"]}, steps


def test_a_run_changed_while_its_task_ran_is_read_before_the_next_is_claimed(
    home: Path, tmp_path: Path
) -> None:
    """Another writer changes the run while an idempotent task runs (here: the next task skipped, as a
    person's answer or another process could): the end of the task finds the run's revision moved, so
    the next decision reads the run instead of claiming from what this process held."""
    tasks = _chain("f.inline_safe", "w", 2)
    tasks[0]["call"]["args"]["until_file"] = "go"
    command = [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "flow", "run"]
    proc = subprocess.Popen(
        [*command, str(_flow(tmp_path, tasks))],
        cwd=ROOT, env={**os.environ, "TETHER_HOME": str(home), **ENV}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with Runtime.open(home) as runtime:
            wait_for(lambda: runtime.jobs.list(active=True), what="the first task to run")
            run_id = _only_run(home)
            runtime.runs.move_task(run_id, "i1", waiting=None, status="skipped", message="skipped meanwhile")
        (home / "go").touch()
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
    run = _show(home, run_id)
    assert run["status"] == "completed", run
    assert [t["status"] for t in run["tasks"]] == ["completed", "skipped"], run["tasks"]
    assert _effects(home) == {"w-i0": 1}


def test_an_end_never_claims_a_call_of_its_own_wave(home: Path, tmp_path: Path) -> None:
    """Found in review: in a wave of two inline calls, the first could end before the second was
    claimed. Its end then decided from the run it held, in which the second was still pending, and
    claimed it; the second's own claim found its id taken and followed a claim nobody would run, for
    ever. Only an attempt alone in its wave claims ahead. The second call is held before its claim."""
    tasks = [
        {"id": "a", "call": {"task": "f.inline_safe", "args": {"key": "v-a"}}},
        {"id": "b", "call": {"task": "f.inline_safe_too", "args": {"key": "v-b"}}},
        {"id": "c", "call": {"task": "f.inline_safe", "args": {"key": "v-c"}}, "depends_on": ["a", "b"]},
    ]
    go = home / "go"
    command = [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "flow", "run"]
    proc = subprocess.Popen(
        [*command, str(_flow(tmp_path, tasks))],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "TETHER_HOME": str(home), **ENV,
             "TETHER_FAULTS": f"inline.before_claim.f.inline_safe_too=wait:{go}"},
    )  # fmt: skip
    try:
        wait_for(lambda: _effects(home) == {"v-a": 1}, what="the wave's first call to end")
        with Runtime.open(home) as runtime:
            wait_for(lambda: not runtime.jobs.list(active=True), what="the first call's end on record")
        go.touch()
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
    run = _show(home, _only_run(home))
    assert [t["status"] for t in run["tasks"]] == ["completed"] * 3, run["tasks"]
    assert _effects(home) == {"v-a": 1, "v-b": 1, "v-c": 1}


def test_the_executors_own_tasks_are_never_claimed_ahead(home: Path, tmp_path: Path) -> None:
    """Found in review: ``jobs.status`` is inline, idempotent and needs no check, so the end before it
    claimed it ahead, and its placeholder handler ran instead of the executor's answer (scoped to the
    run's own jobs). It goes through ``execute``, as every call of it does."""
    tasks = [
        {"id": "a", "call": {"task": "f.inline_safe", "args": {"key": "o-a"}}},
        {"id": "b", "call": {"task": "jobs.status", "args": {"execution_id": "not-one-of-this-run"}},
         "depends_on": ["a"]},
    ]  # fmt: skip
    _cli(home, "flow", "run", str(_flow(tmp_path, tasks)), "--json")
    b = _show(home, _only_run(home))["tasks"][1]
    said = " ".join(str(s.get("message", "")) for s in b["steps"])
    assert "never by a worker" not in said and "not-one-of-this-run" in said, b["steps"]


def test_a_last_task_that_waits_for_a_person_does_not_end_the_run_with_it(home: Path, tmp_path: Path) -> None:
    """A run's end goes on record with its last inline task's end only when the run completed: a last
    task whose result a person reviews leaves the run waiting for that person, and their approval
    completes it."""
    tasks = _chain("f.inline_safe", "p", 2)
    tasks[1]["review"] = "after"
    code, out, err = _cli(home, "flow", "run", str(_flow(tmp_path, tasks)), "--json")
    assert code == 3, (out, err)
    run_id = _only_run(home)
    run = _show(home, run_id)
    assert run["status"] == "waiting_for_human" and run["tasks"][1]["status"] == "waiting_for_human", run
    code, _, err = _cli(home, "flow", "approve", run_id, "i1")
    assert code == 0, err
    code, _, err = _cli(home, "flow", "resume", run_id)  # driven on here: no executor runs in the tests
    assert code == 0, err
    assert _show(home, run_id)["status"] == "completed"
    assert _effects(home) == {"p-i0": 1, "p-i1": 1}


def test_a_crash_after_a_runs_last_end_which_ended_the_run_leaves_it_completed(
    home: Path, tmp_path: Path
) -> None:
    """Killed right after the last task's end, which put the run's end on record with it, before DBOS
    recorded the decision step: the run is completed, and resuming it runs nothing again."""
    flow = _flow(tmp_path, _chain("f.inline_once", "z", 1))
    code, _, err = _cli(home, "flow", "run", str(flow), "--json", TETHER_FAULTS="inline.after_end=kill")
    assert code == -signal.SIGKILL, err
    run_id = _only_run(home)
    assert _show(home, run_id)["status"] == "completed"
    _cli(home, "flow", "resume", run_id)
    run = _show(home, run_id)
    assert run["status"] == "completed" and [s["status"] for s in run["tasks"][0]["steps"]] == ["completed"]
    assert _effects(home) == {"z-i0": 1}
