"""The supervisor's engine from the outside: real `tether` processes, a real SQLite home, DBOS's own file.

Every test drives runs through the CLI (`tether flow run`, `tether goal`, `tether worker`, `tether flow
approve`), reads the run's record (`--json`) and the ledger the tasks write by their own clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_openai import FakeOpenAI, completion
from tests.support.flowkit import ledger
from tests.support.helpers import ROOT, tether_cli
from tests.support.helpers import wait_for as eventually

FLOWS = "tests.support.flowkit:flows"
pytestmark = pytest.mark.timeout(180)


def flow_file(tmp_path: Path, tasks: list[dict[str, Any]], **plan: Any) -> Path:
    path = tmp_path / f"flow-{len(list(tmp_path.glob('flow-*')))}.yaml"
    path.write_text(yaml.safe_dump({"caller": "cli", **plan, "tasks": tasks}, allow_unicode=True))
    return path


def cli(home: Path, *args: str, timeout: float = 120) -> tuple[int, Any, str]:
    code, out, err = tether_cli("--registry", FLOWS, *args, home=home, timeout=timeout)
    try:
        document = json.loads(out.strip().splitlines()[-1]) if "--json" in args and out.strip() else out
    except ValueError:
        document = out
    return code, document, err


def call(task_id: str, task: str, *, depends_on: tuple[str, ...] = (), **args: Any) -> dict[str, Any]:
    return {"id": task_id, "call": {"task": task, "args": args}, "depends_on": list(depends_on)}


def statuses(run: dict[str, Any]) -> dict[str, str]:
    return {t["id"]: t["status"] for t in run["tasks"]}


def test_a_flow_runs_to_the_end_in_dependency_order_and_reports_one_json_document(
    home: Path, tmp_path: Path
) -> None:
    tasks = [
        call("a", "f.safe", key="a"),
        call("b", "f.once", key="b", depends_on=("a",)),
        call("c", "f.once", key="c", depends_on=("a",)),
        call("d", "f.safe", key="d", depends_on=("b", "c")),
    ]
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--json")
    assert code == 0, (run, err)
    assert run["status"] == "completed"
    assert statuses(run) == {"a": "completed", "b": "completed", "c": "completed", "d": "completed"}
    for task in run["tasks"]:
        assert task["attempts"] == 1 and len(task["steps"]) == 1 and task["steps"][0]["status"] == "completed"
    marks = {m["key"]: m for m in ledger(home)}
    assert sorted(marks) == ["a", "b", "c", "d"]
    assert marks["a"]["ended"] <= min(marks["b"]["began"], marks["c"]["began"])
    assert max(marks["b"]["ended"], marks["c"]["ended"]) <= marks["d"]["began"]
    code, runs, _ = cli(home, "flow", "list", "--json")
    assert code == 0 and runs == [
        {"run_id": run["run_id"], "status": "completed", "goal": "", "tasks_total": 4, "tasks_done": 4}
    ]
    # The jobs are the executor's own records, with the run as their origin.
    code, shown, _ = cli(home, "flow", "show", run["run_id"][:8], "--json")
    assert code == 0 and shown["run_id"] == run["run_id"]


def test_parallel_tasks_that_share_a_resource_never_overlap(home: Path, tmp_path: Path) -> None:
    tasks = [call(f"arm{i}", "f.arm", key=f"arm{i}", seconds=0.3) for i in range(4)]
    tasks += [call(f"free{i}", "f.safe", key=f"free{i}", seconds=0.3) for i in range(3)]
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks, max_parallel=4)), "--json")
    assert code == 0 and run["status"] == "completed", (run, err)
    marks = ledger(home)
    arm = sorted((m["began"], m["ended"]) for m in marks if str(m["key"]).startswith("arm"))
    assert len(arm) == 4
    for (_, end), (begin, _) in pairwise(arm):
        assert end <= begin, f"two arm tasks overlapped: {arm}"
    free = sorted((m["began"], m["ended"]) for m in marks if str(m["key"]).startswith("free"))
    # Independent tasks did run side by side (with an arm task or each other).
    everything = sorted((m["began"], m["ended"]) for m in marks)
    assert any(b < a_end for (_, a_end), (b, _) in pairwise(everything)), (arm, free)


def test_the_failure_policy_retries_at_once_then_later_with_a_durable_delay(
    home: Path, tmp_path: Path
) -> None:
    tasks = [
        {
            **call("flaky", "f.once", key="flaky", fail_first=2),
            "retry": {"at_once": 1, "later": 1, "backoff_s": 1},
        },
    ]
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--json")
    assert code == 0 and run["status"] == "completed", (run, err)
    (task,) = run["tasks"]
    assert task["attempts"] == 3
    steps = task["steps"]
    assert [s["status"] for s in steps] == ["failed", "failed", "completed"]
    assert "not ready yet" in steps[0]["message"]
    assert len(ledger(home)) == 1  # the effect happened once


def test_a_path_that_keeps_failing_asks_a_person_with_diagnostics_and_an_answer_drives_it_on(
    home: Path, tmp_path: Path
) -> None:
    tasks = [
        {**call("broken", "f.broken"), "retry": {"at_once": 1}},
        call("after", "f.safe", key="after", depends_on=("broken",)),
    ]
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--json")
    assert code == 3, (run, err)
    assert run["status"] == "waiting_for_human"
    broken = run["tasks"][0]
    assert broken["status"] == "waiting_for_human" and broken["attempts"] == 2
    assert "disk is full" in broken["message"]
    assert broken["diagnostics"]["outcome"] == "failed" and "disk is full" in broken["diagnostics"]["message"]
    assert broken["review"]["kind"] == "failed"
    # The person gives up on it: it is rejected, what needed it is skipped, and the run is over.
    code, answered, err = cli(
        home, "flow", "reject", run["run_id"], "broken", "--reason", "no disk", "--json"
    )
    assert code == 0, (answered, err)
    code, _, err = cli(home, "flow", "resume", run["run_id"], "--json")
    assert code in (0, 1), err
    final = _settle(home, run["run_id"])
    assert final["status"] == "failed", final
    assert statuses(final) == {"broken": "rejected", "after": "skipped"}
    # It says what the person did, not what it waited for before.
    assert final["tasks"][0]["message"] == "rejected by person:cli: no disk", final["tasks"][0]
    assert ledger(home) == []


def _settle(home: Path, run_id: str) -> dict[str, Any]:
    def over() -> dict[str, Any] | None:
        code, shown, _ = cli(home, "flow", "show", run_id, "--json")
        return shown if code == 0 and shown["status"] != "running" else None

    return eventually(over, timeout=60, what=f"run {run_id} to stop")


def test_a_review_pause_holds_nothing_survives_and_an_approval_while_nothing_runs_goes_on(
    home: Path, tmp_path: Path
) -> None:
    tasks = [
        call("prepare", "f.safe", key="prepare"),
        {**call("wipe", "f.wipe", key="wipe", depends_on=("prepare",)), "review": "before"},
        call("report", "f.safe", key="report", depends_on=("wipe",)),
    ]
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--json")
    assert code == 3 and run["status"] == "waiting_for_human", (run, err)
    assert statuses(run) == {"prepare": "completed", "wipe": "waiting_for_human", "report": "pending"}
    # The executor exited: no process holds an executor slot, a lock, or a parked workflow.
    from tether.supervisor import durable

    assert durable.live_executors(home) == []
    # Approving while no executor runs records the answer and enqueues the continuation, once.
    code, out, err = cli(home, "flow", "approve", run["run_id"], "wipe")
    assert code == 0 and "approve recorded" in out, err
    code, out, err = cli(home, "flow", "approve", run["run_id"], "wipe")
    assert code == 2 and "does not wait" in err
    # A later executor (a worker that exits when idle) runs the rest.
    code, out, err = cli(home, "worker", "--until-idle", timeout=120)
    assert code == 0, err
    code, final, _ = cli(home, "flow", "show", run["run_id"], "--json")
    assert final["status"] == "completed", final
    assert [m["key"] for m in ledger(home)] == ["prepare", "wipe", "report"]


def test_a_destructive_call_without_review_is_refused_and_never_runs(home: Path, tmp_path: Path) -> None:
    tasks = [call("wipe", "f.wipe", key="wipe")]
    code, out, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)))
    assert code == 2 and "review: before" in (out + err)
    assert ledger(home) == []


def test_a_loop_runs_until_its_condition_and_escalates_at_its_bound(home: Path, tmp_path: Path) -> None:
    tasks = [
        {**call("poll", "f.safe", key="poll"), "outputs": ["data.value"],
         "loop": {"until": {"task": "poll", "key": "data.value", "equals": 99}, "max_iterations": 3}},
    ]  # fmt: skip
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--json")
    assert code == 3, (run, err)
    (task,) = run["tasks"]
    assert task["status"] == "waiting_for_human" and task["iterations"] == 3
    assert task["review"]["kind"] == "loop_bound"
    assert len(ledger(home)) == 3


def test_follow_up_tasks_proposed_by_a_task_are_validated_and_run(home: Path, tmp_path: Path) -> None:
    tasks = [call("write", "f.propose", key="login-api")]
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--json")
    assert code == 0 and run["status"] == "completed", (run, err)
    assert statuses(run) == {"write": "completed", "test-login-api": "completed"}
    assert "accepted: test-login-api" in run["tasks"][0]["diagnostics"]["proposals"]
    assert [m["key"] for m in ledger(home)] == ["login-api", "test-login-api"]


def test_cancel_stops_the_running_job_and_ends_the_run(home: Path, tmp_path: Path) -> None:
    tasks = [
        call("long", "f.once", key="long", seconds=30),
        call("next", "f.safe", key="next", depends_on=("long",)),
    ]
    worker = _worker(home)
    try:
        code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--detach", "--json")
        assert code == 0, err
        run_id = run["run_id"]

        # Its job running (its worker's handshake): a task shows "running" from its attempt's record, before
        # its job is (a cancel that lands there is the test below).
        eventually(lambda: tool_running(home), timeout=60, what="the long task's job to run")
        code, _, err = cli(home, "flow", "cancel", run_id)
        assert code == 0, err
        code, final, _ = cli(home, "flow", "show", run_id, "--json")
        assert final["status"] == "cancelled"
        assert statuses(final) == {"long": "cancelled", "next": "cancelled"}
        code, jobs, _ = cli(home, "job", "list", "--json")
        assert all(job["status"] != "running" for job in (jobs if isinstance(jobs, list) else jobs["jobs"]))
    finally:
        _stop(worker)
    assert ledger(home) == []


@pytest.mark.parametrize(
    ("task", "point"),
    [
        ("f.once", "executor.before_record"),
        ("f.inline_once", "inline.before_claim.f.inline_once"),
        ("f.inline_once", "inline.after_claim.f.inline_once"),
    ],
    ids=["worker", "inline", "inline-claimed"],
)
def test_a_cancel_that_lands_before_a_call_begins_keeps_it_from_running(
    home: Path, tmp_path: Path, task: str, point: str
) -> None:
    """Found in review: a cancel stops the jobs of the run it finds on record, and an attempt that had
    read the run before the cancel put its job on record after it, and ran it to its end; an inline
    call the cancel did find, claimed but not begun, ran its handler all the same. Here the executor is
    held at each of those points on purpose: the call never runs, and nothing is left running."""
    reached, go = home / "reached", home / "go"
    worker = _worker(home, TETHER_FAULTS=f"{point}=touch:{reached}+wait:{go}")
    try:
        flow = flow_file(tmp_path, [call("one", task, key="one")])
        code, run, err = cli(home, "flow", "run", str(flow), "--detach", "--json")
        assert code == 0, err
        run_id = run["run_id"]
        eventually(reached.exists, timeout=60, what="the attempt to be held")
        code, _, err = cli(home, "flow", "cancel", run_id)
        assert code == 0, err
        go.touch()

        def ended() -> list[dict[str, Any]] | None:  # its call, refused or stopped: on record as such
            _, jobs, _ = cli(home, "job", "list", "--json")
            listed = jobs if isinstance(jobs, list) else jobs["jobs"]
            mine = [j for j in listed if j["task_id"] == task]
            return listed if mine and all(j["status"] in ("rejected", "stopped") for j in mine) else None

        listed = eventually(ended, timeout=60, what="the held call to end without running")
        assert all(job["status"] not in ("running", "completed") for job in listed), listed
        assert any("cancelled" in job["message"] for job in listed if job["task_id"] == task), listed
        _, final, _ = cli(home, "flow", "show", run_id, "--json")
        assert final["status"] == "cancelled" and statuses(final) == {"one": "cancelled"}, final
        steps = final["tasks"][0]["steps"]
        assert all(s["status"] not in ("running", "completed") for s in steps), steps
    finally:
        _stop(worker)
    assert ledger(home) == []


def _worker(home: Path, **env: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "worker"],
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0", **env},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    from tether.supervisor import durable

    eventually(lambda: durable.live_executors(home), timeout=30, what="the worker to hold a slot")
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def test_short_commands_never_execute_or_steal_a_live_executors_workflow(home: Path, tmp_path: Path) -> None:
    """The hazard in the DBOS notes: a process that launched DBOS would re-dispatch a live executor's
    pending workflow. Short commands only use the client: the running step runs once, in the worker."""
    tasks = [
        call("slow", "f.once", key="slow", seconds=3),
        call("then", "f.once", key="then", depends_on=("slow",)),
    ]
    worker = _worker(home)
    try:
        code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--detach", "--json")
        assert code == 0, err
        deadline = time.monotonic() + 60
        shown: dict[str, Any] = {}
        while time.monotonic() < deadline:
            for args in (("flow", "list", "--json"), ("flow", "show", run["run_id"], "--json"),
                         ("flow", "resume", run["run_id"], "--json")):  # fmt: skip
                code, shown, err = cli(home, *args)
                assert code == 0, err
            code, shown, _ = cli(home, "flow", "show", run["run_id"], "--json")
            if shown["status"] != "running":
                break
        assert shown["status"] == "completed", shown
    finally:
        _stop(worker)
    marks = ledger(home)
    assert sorted(m["key"] for m in marks) == ["slow", "then"]
    assert {m["pid"] for m in marks}.isdisjoint({os.getpid()})
    # Every segment ran under the worker's executor id (slot 0): nobody else executed one.
    import sqlite3

    with sqlite3.connect(home / "dbos.sqlite") as conn:
        owners = {row[0] for row in conn.execute("SELECT executor_id FROM workflow_status")}
    assert len(owners) == 1 and next(iter(owners)).endswith("/slot-0"), owners


@pytest.mark.parametrize(("task", "expected"), [("f.once", "waiting_for_human"), ("f.safe", "completed")])
def test_a_worker_killed_mid_task_is_an_explicit_unknown_that_the_policy_settles(
    home: Path, tmp_path: Path, task: str, expected: str
) -> None:
    """A worker that dies mid-effect may or may not have acted: a task that must run once goes to a
    person (never a silent second run); an idempotent one is run again."""
    # The task holds on until the test lets go: the kill lands while it runs, however slow the polls.
    tasks = [{**call("victim", task, key="victim", until_file="go"), "retry": {"at_once": 1}}]
    worker = _worker(home)
    try:
        code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--detach", "--json")
        assert code == 0, err

        def running_pid() -> int | None:
            _, jobs, _ = cli(home, "job", "list", "--json")
            live = [j for j in jobs if j["status"] == "running" and j["data"].get("pid")]
            return live[0]["data"]["pid"] if live else None

        pid = eventually(running_pid, timeout=60, what="the worker to run")
        os.killpg(pid, signal.SIGKILL)  # the worker and only it (its own process group)
        (home / "go").touch()  # a second attempt, if the policy runs one, goes through
        final = _settle(home, run["run_id"])
    finally:
        _stop(worker)
    (victim,) = final["tasks"]
    assert final["status"] == expected, final
    assert victim["steps"][0]["status"] == "unknown"
    if task == "f.once":
        assert victim["review"]["kind"] == "unknown" and victim["attempts"] == 1
        assert "may or may not have taken effect" in victim["message"]
        assert ledger(home) == []
    else:
        assert victim["attempts"] == 2 and victim["steps"][1]["status"] == "completed"


@pytest.mark.parametrize(
    ("limit", "expected"),
    [({"timeout_s": 1}, "timed out"), ({"heartbeat_s": 1}, "stuck: no progress for 1 s")],
)
def test_a_task_past_its_timeout_or_silent_past_its_heartbeat_is_stopped_and_handed_to_the_policy(
    home: Path, tmp_path: Path, limit: dict[str, float], expected: str
) -> None:
    tasks = [{**call("slow", "f.once", key="slow", seconds=30), "retry": {"at_once": 0}, **limit}]
    started = time.monotonic()
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--json")
    assert code == 3, (run, err)
    assert time.monotonic() - started < 25  # it did not wait the task out
    (slow,) = run["tasks"]
    assert slow["status"] == "waiting_for_human" and slow["steps"][0]["status"] == "stopped"
    assert expected in slow["message"]
    assert ledger(home) == []


def test_runs_past_retention_leave_both_tethers_record_and_dboss_log(home: Path, tmp_path: Path) -> None:
    import sqlite3

    code, _, err = cli(
        home, "flow", "run", str(flow_file(tmp_path, [call("a", "f.safe", key="a")])), "--json"
    )
    assert code == 0, err
    with sqlite3.connect(home / "dbos.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM workflow_status").fetchone()[0] == 1
    with sqlite3.connect(home / "tether.db") as conn:
        conn.execute("UPDATE runs SET ended_at = '2001-01-01T00:00:00+00:00'")
    code, _, err = cli(home, "worker", "--until-idle")  # an executor applies [store].keep_days on start
    assert code == 0, err
    with sqlite3.connect(home / "dbos.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM workflow_status").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM operation_outputs").fetchone()[0] == 0
    code, runs, _ = cli(home, "flow", "list", "--json")
    assert runs == []


LONG_LIVED = """
import asyncio, sqlite3, sys, time
from tether.execution.executor import Executor
from tether.runtime import Runtime
from tether.supervisor import durable, engine
from tests.support.flowkit import flows

engine.PRUNE_EVERY_S, engine.WATCH_SLOTS_S = 0.0, 0.05  # retention on every pass, for the test

async def main() -> None:
    with Runtime.open() as rt, Executor(flows, runtime=rt) as executor:
        await engine.launch(rt, executor)
        try:
            print("launched", flush=True)
            sys.stdin.readline()  # the test aged the run meanwhile
            deadline = time.monotonic() + 60
            while rt.runs.get(sys.argv[1]) is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            print("pruned" if rt.runs.get(sys.argv[1]) is None else "kept", flush=True)
        finally:
            engine.shutdown()

asyncio.run(main())
"""


def test_a_long_lived_executor_applies_retention_as_it_goes(home: Path, tmp_path: Path) -> None:
    import sqlite3

    code, run, err = cli(
        home, "flow", "run", str(flow_file(tmp_path, [call("a", "f.safe", key="a")])), "--json"
    )
    assert code == 0, err
    with subprocess.Popen(
        [sys.executable, "-c", LONG_LIVED, run["run_id"]], cwd=ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    ) as executor:  # fmt: skip
        try:
            assert executor.stdout is not None and executor.stdin is not None
            assert executor.stdout.readline().strip() == "launched"  # it pruned on launch: the run was new
            with sqlite3.connect(home / "tether.db") as conn:  # and it ended long ago, now
                conn.execute("UPDATE runs SET ended_at = '2001-01-01T00:00:00+00:00'")
            executor.stdin.write("go\n")
            executor.stdin.flush()
            assert executor.stdout.readline().strip() == "pruned"
        finally:
            executor.kill()


def test_detach_with_no_executor_starts_one_that_finishes_the_run_and_exits(
    home: Path, tmp_path: Path
) -> None:
    tasks = [call("a", "f.once", key="a", seconds=0.5), call("b", "f.once", key="b", depends_on=("a",))]
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--detach", "--json")
    assert code == 0 and run["status"] == "running", (run, err)
    code, out, err = cli(home, "flow", "show", run["run_id"], "--follow")
    assert code == 0, (out, err)
    code, final, _ = cli(home, "flow", "show", run["run_id"], "--json")
    assert final["status"] == "completed" and [m["key"] for m in ledger(home)] == ["a", "b"]
    from tether.supervisor import durable

    # The background executor leaves once nothing runs.
    eventually(lambda: not durable.live_executors(home), timeout=30, what="the background worker to exit")


@pytest.mark.parametrize("run_id", ["x" * 5000, "../run-%_\u202e"])
def test_a_bad_run_id_is_one_clear_line_for_every_run_command(home: Path, run_id: str) -> None:
    for command in (("flow", "show"), ("flow", "cancel"), ("flow", "resume"), ("flow", "approve")):
        args = [*command, run_id, *(["t1"] if command[1] == "approve" else []), "--json"]
        code, document, err = cli(home, *args)
        assert code == 2 and "Traceback" not in err, (command, document, err)
        assert isinstance(document, dict) and "run" in document["error"]["message"], (command, document)


def test_a_follower_takes_over_when_the_executor_it_relied_on_leaves(home: Path, tmp_path: Path) -> None:
    """Two `flow run`s: the first becomes the executor and ends with its own run; the second, which
    only followed, must not wait forever for a run nobody executes."""
    # Each step holds on until the test lets it go: the first run is surely still going when the second
    # starts following it, and the second's step when the first executor has left.
    first = flow_file(tmp_path, [call("quick", "f.safe", key="quick", until_file="go-quick")])
    second = flow_file(tmp_path, [call("long", "f.once", key="long", until_file="go-long")])
    env = {**os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0"}
    base = [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "flow", "run"]
    one = subprocess.Popen([*base, str(first), "--json"], env=env, cwd=ROOT, stdout=subprocess.PIPE)
    from tether.supervisor import durable

    eventually(lambda: durable.live_executors(home), timeout=30, what="the first run to become the executor")
    two = subprocess.Popen(
        [*base, str(second), "--json"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:

        def both_on_record() -> bool:
            runs = cli(home, "flow", "list", "--json")[1]
            return isinstance(runs, list) and len(runs) == 2

        eventually(both_on_record, timeout=60, what="the second run to be on record")
        (home / "go-quick").touch()
        out, _ = one.communicate(timeout=60)
        assert json.loads(out)["status"] == "completed"
        (home / "go-long").touch()  # the first executor has left
        done, said = two.communicate(timeout=120)
    finally:
        for proc in (one, two):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert two.returncode == 0 and json.loads(done)["status"] == "completed", said[-500:]
    assert sorted(m["key"] for m in ledger(home)) == ["long", "quick"]


def test_an_approval_killed_between_its_record_and_its_enqueue_is_not_a_stuck_run(
    home: Path, tmp_path: Path
) -> None:
    """The answer is on record but the process died before it enqueued the continuation: the run is
    `running` with no segment to run it. The next executor (or `flow resume`) supplies the segment."""
    tasks = [{**call("gate", "f.once", key="gate"), "review": "before"}]
    code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--json")
    assert code == 3, (run, err)
    code, _, err = tether_cli("--registry", FLOWS, "flow", "approve", run["run_id"], "gate", home=home,
                              TETHER_CLI_SERVER="0", TETHER_FAULTS="service.after_answer=kill")  # fmt: skip
    assert code == -signal.SIGKILL, err
    code, shown, _ = cli(home, "flow", "show", run["run_id"], "--json")
    assert shown["status"] == "running" and shown["tasks"][0]["status"] == "pending"
    code, _, err = cli(home, "worker", "--until-idle")
    assert code == 0, err
    code, final, _ = cli(home, "flow", "show", run["run_id"], "--json")
    assert final["status"] == "completed", final
    assert [m["key"] for m in ledger(home)] == ["gate"]


def use_model(home: Path, server: FakeOpenAI) -> None:
    """The home's model is the fake OpenAI-compatible server."""
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "vllm"\nmodel = "qwen2.5"\nbase_url = "{server.url}"\n', encoding="utf-8"
    )


def tool_running(home: Path, task: str = "f.once") -> bool:
    _, jobs, _ = cli(home, "job", "list", "--json")
    return any(j["task_id"] == task and j["status"] == "running" for j in jobs)


def _in_background(home: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """A `tether` command of its own process group, its output kept for ``communicate``."""
    return subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, *args],
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0", **env},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def test_an_agent_turn_killed_mid_tool_resumes_from_its_last_step_asking_nothing_twice(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """An agent task's turn is a workflow whose model calls and tool executions are steps: the executor
    dies while the turn's tool runs; the next executor replays the turn (the model is not asked again
    for what it answered), re-attaches to the live tool (it acts once) and goes on to the end."""
    use_model(home, fake_openai)
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__once", '{"key": "slow", "until_file": "go"}')]))
    fake_openai.reply(completion("已完成：slow 做了一次。"))
    tasks = [{"id": "agent", "executor": "agent", "description": "做一次 slow 的工作"}]
    env = {"TETHER_MODEL_STREAM": "0"}
    first = _worker(home, **env)
    second = None
    try:
        code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--detach", "--json")
        assert code == 0, (run, err)

        eventually(lambda: tool_running(home), timeout=60, what="the agent's tool to run")
        os.killpg(first.pid, signal.SIGKILL)  # the executor only: the tool's worker has its own group
        first.wait()
        assert len(fake_openai.requests) == 1
        second = _worker(home, **env)
        (home / "go").touch()  # the tool, live across the crash, may end now
        final = _settle(home, run["run_id"])
    finally:
        for proc in (first, second):
            if proc is not None:
                _stop(proc)
    assert final["status"] == "completed", final
    (agent,) = final["tasks"]
    assert agent["attempts"] == 1 and agent["message"] == "已完成：slow 做了一次。"
    assert len(fake_openai.requests) == 2, "a model call that had answered was asked again"
    assert [e["key"] for e in ledger(home)] == ["slow"], "the tool acted other than once"
    resumed = fake_openai.requests[1]["messages"]
    assert [m["role"] for m in resumed[1:]] == ["user", "assistant", "tool"]
    assert json.loads(resumed[-1]["content"])["status"] == "completed"
    # The turn's record holds each step once, and each of its events was sent once.
    from tether.runtime import Runtime

    with Runtime.open(home) as runtime:
        thread = f"run-{agent['steps'][0]['execution_id']}"
        steps = runtime.threads.steps(thread)
        kinds = [(s.turn, s.kind, s.status) for s in steps]
        events = [e.kind for e in runtime.events.read(topics=[f"thread:{thread}"])]
    assert kinds == [(1, "model", "finished"), (1, "tool", "finished"), (1, "model", "finished"),
                     (1, "final", "finished")], kinds  # fmt: skip
    assert events.count("turn_started") == 1 and events.count("tool_started") == 1, events
    assert events.count("turn_finished") == 1, events
    # What the run cost: each model call once (11 in / 7 out each, as the service reported), the
    # replayed one included once; the task's and the run's totals say the same.
    recorded = [c for s in steps if s.kind == "model" for c in (s.result or {})["model_calls"]]
    assert [(c["model"], c["provider"], c["input_tokens"], c["output_tokens"]) for c in recorded] == [
        ("gpt-4o-mini", "vllm", 11, 7),
        ("gpt-4o-mini", "vllm", 11, 7),
    ]
    spent = (final["usage"]["model_calls"], final["usage"]["input_tokens"], final["usage"]["output_tokens"])
    assert spent == (2, 22, 14) and agent["usage"] == final["usage"], final
    code, shown, _ = tether_cli("--registry", FLOWS, "flow", "show", run["run_id"], home=home, COLUMNS="200")
    assert code == 0 and "2 model calls · 22 in / 14 out tokens" in shown, shown


def test_a_persons_turn_handed_to_an_executor_survives_its_crash_and_finishes_where_it_was(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """`tether run` hands the turn to the running executor and follows it; the executor dies while the
    turn's tool runs; the next executor resumes the turn and the waiting `tether run` prints its end."""
    use_model(home, fake_openai)
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__once", '{"key": "slow", "until_file": "go"}')]))
    fake_openai.reply(completion("slow is done, once."))
    env = {"TETHER_MODEL_STREAM": "0"}
    first = _worker(home, **env)
    second = None
    follower = _in_background(home, env, "run", "do slow", "--json")
    try:
        eventually(lambda: tool_running(home), timeout=60, what="the turn's tool to run")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        second = _worker(home, **env)
        (home / "go").touch()  # the tool, live across the crash, may end now
        out, err = follower.communicate(timeout=90)
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.communicate()
        for proc in (first, second):
            if proc is not None:
                _stop(proc)
    assert follower.returncode == 0, (out, err)
    turn = json.loads(out)
    assert turn["status"] == "completed" and turn["final"] == "slow is done, once.", turn
    assert [s["kind"] for s in turn["steps"]] == ["model", "tool", "model", "final"]
    assert len(fake_openai.requests) == 2, "a model call that had answered was asked again"
    assert [e["key"] for e in ledger(home)] == ["slow"], "the tool acted other than once"


def test_a_confirmation_handed_to_an_executor_runs_exactly_the_call_asked_about_once(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    """The question a handed-over turn ends with is answered by `tether run --thread ID --confirm`, also
    handed over: exactly that destructive call runs, once, and the turn goes on to the model's answer."""
    use_model(home, fake_openai)
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__wipe", '{"key": "disk"}')]))
    fake_openai.reply(completion("disk wiped."))
    env = {"TETHER_MODEL_STREAM": "0"}
    worker = _worker(home, **env)
    try:
        code, asked, err = cli(home, "run", "wipe the disk", "--json")
        assert code == 3 and asked["status"] == "needs_confirmation", (asked, err)
        assert ledger(home) == []
        code, done, err = cli(home, "run", "--thread", asked["thread_id"], "--confirm", "--json")
        assert code == 0 and done["final"] == "disk wiped.", (done, err)
        code, again, err = cli(home, "run", "--thread", asked["thread_id"], "--confirm", "--json")
        assert code == 2 and "not waiting for a confirmation" in again["error"]["message"], (again, err)
    finally:
        _stop(worker)
    assert [e["key"] for e in ledger(home)] == ["disk"]
    assert len(fake_openai.requests) == 2


def test_a_goals_plan_is_the_runs_first_step_and_a_crash_never_asks_the_planner_again(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    """With a model, `tether goal` records the run and its executor plans it in a step: the executor dies
    while the first milestone's tool runs; the next one goes on without asking the planner (or the
    milestone's first model call) again. A plan the model cannot make fails the run with its reason."""
    use_model(home, fake_openai)
    milestone = {"id": "m1", "description": "act once on slow"}
    fake_openai.reply(
        completion(None, tool_calls=[("p1", "submit_plan", json.dumps({"milestones": [milestone]}))])
    )
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__once", '{"key": "slow", "until_file": "go"}')]))
    fake_openai.reply(completion("slow done."))
    env = {"TETHER_MODEL_STREAM": "0"}
    first = _worker(home, **env)
    second = None
    try:
        code, run, err = cli(home, "goal", "do slow once", "--detach", "--json")
        assert code == 0, (run, err)

        eventually(lambda: tool_running(home), timeout=60, what="the milestone's tool to run")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        second = _worker(home, **env)
        (home / "go").touch()  # the tool, live across the crash, may end now
        final = _settle(home, run["run_id"])
        beyond = {"milestones": [], "beyond": "no tool can fly to Mars"}
        fake_openai.reply(completion(None, tool_calls=[("p2", "submit_plan", json.dumps(beyond))]))
        code, failed, err = cli(home, "goal", "fly to Mars", "--json")
    finally:
        for proc in (first, second):
            if proc is not None:
                _stop(proc)
    assert final["status"] == "completed" and [t["id"] for t in final["tasks"]] == ["m1"], final
    assert len(fake_openai.requests) == 4, "the planner or a model call that had answered was asked again"
    assert [e["key"] for e in ledger(home)] == ["slow"]
    assert code == 1 and failed["status"] == "failed", (failed, err)
    code, shown, _ = cli(home, "flow", "show", failed["run_id"], "--json")
    assert "no tool can fly to Mars" in shown["message"], shown


def test_cancel_stops_an_agent_turn_and_its_tool_and_nothing_of_it_comes_back(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """An agent task's turn is a child workflow running tools from its own thread: cancelling the run
    stops the tool and cancels the turn (its record ends), and a restarted executor does not bring the
    turn back (the model is never asked again)."""
    use_model(home, fake_openai)
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__once", '{"key": "long", "seconds": 30}')]))
    tasks = [{"id": "agent", "executor": "agent", "description": "do the long thing"}]
    env = {"TETHER_MODEL_STREAM": "0"}
    worker = _worker(home, **env)
    again = None
    try:
        code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--detach", "--json")
        assert code == 0, (run, err)

        eventually(lambda: tool_running(home), timeout=60, what="the agent's tool to run")
        code, _, err = cli(home, "flow", "cancel", run["run_id"])
        assert code == 0, err

        def tool_stopped() -> bool:
            _, jobs, _ = cli(home, "job", "list", "--json")
            return all(j["status"] != "running" for j in jobs)

        eventually(tool_stopped, timeout=30, what="the agent's tool to stop")
        _stop(worker)
        again = _worker(home, **env)  # recovers what the first left: the cancelled turn must stay so
        from tether.runtime import Runtime

        def turn_ended() -> bool:
            with Runtime.open(home) as runtime:
                record = runtime.threads.turn(f"run-{first_execution_id(home, run['run_id'])}", 1)
            return record is not None and record.status != "running"

        eventually(turn_ended, timeout=30, what="the cancelled turn's record to end")
    finally:
        _stop(worker)
        if again is not None:
            _stop(again)
    code, final, _ = cli(home, "flow", "show", run["run_id"], "--json")
    assert final["status"] == "cancelled", final
    assert ledger(home) == [] and len(fake_openai.requests) == 1


def first_execution_id(home: Path, run_id: str) -> str:
    """The execution id of the run's first attempt (an agent's thread is ``run-<it>``)."""
    _, shown, _ = cli(home, "flow", "show", run_id, "--json")
    return str(shown["tasks"][0]["steps"][0]["execution_id"])


def test_a_handed_over_turn_whose_executor_dies_is_finished_by_the_command_that_follows_it(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    """No executor comes back: the `tether run` that handed the turn over becomes the executor and
    finishes the turn from the step it was on."""
    use_model(home, fake_openai)
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__once", '{"key": "slow", "until_file": "go"}')]))
    fake_openai.reply(completion("slow is done, once."))
    env = {"TETHER_MODEL_STREAM": "0"}
    worker = _worker(home, **env)
    follower = _in_background(home, env, "run", "do slow", "--json")
    try:
        eventually(lambda: tool_running(home), timeout=60, what="the turn's tool to run")
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        (home / "go").touch()  # the tool, live across the crash, may end now
        out, err = follower.communicate(timeout=90)
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.communicate()
        _stop(worker)
    assert follower.returncode == 0, (out, err)
    assert json.loads(out)["final"] == "slow is done, once."
    assert len(fake_openai.requests) == 2 and [e["key"] for e in ledger(home)] == ["slow"]


def test_a_profiles_system_prompt_reaches_its_model(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Issue 21: a plan's executor profile had its ``system_prompt`` validated and then dropped — the
    profile's model never saw it. It comes after tether's own instructions, which it cannot change."""
    use_model(home, fake_openai)
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__once", '{"key": "desk", "seconds": 0}')]))
    fake_openai.reply(completion("filed once."))
    persona = "You are the research desk: answer in one line, cite the ledger key."
    tasks = [{"id": "desk", "executor": "desk", "description": "do the desk's work once"}]
    profiles = {"desk": {"caller": "agent", "system_prompt": persona}}
    env = {"TETHER_MODEL_STREAM": "0"}
    worker = _worker(home, **env)
    try:
        path = flow_file(tmp_path, tasks, profiles=profiles)
        code, run, err = cli(home, "flow", "run", str(path), "--detach", "--json")
        assert code == 0, (run, err)
        final = _settle(home, run["run_id"])
    finally:
        _stop(worker)
    assert final["status"] == "completed", final
    for request in fake_openai.requests:
        system = request["messages"][0]
        assert system["role"] == "system" and persona in system["content"], system
        assert system["content"].index(persona) > 0  # after tether's own instructions
