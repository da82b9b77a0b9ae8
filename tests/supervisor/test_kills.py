"""Durability under SIGKILL: the executor of a 29-task flow (26 calls, six of them inline, 3 agent turns that
each ask a model and run a tool) is killed at random moments, again and again,
and a new one picks the run up each time (`tether flow resume`).

What must hold after every storm: the run ends in an explicit state (never `running`), no task is left
`running`, a task that must run once ran at most once (the ledger its handler writes), every completed
task's effect is on the ledger, and nothing is left running in the job table. The same on PostgreSQL.

The default run kills a few times per database; the slow tier (`TETHER_FLOW_KILLS=100`) many more.
"""

from __future__ import annotations

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
import yaml

from tests.conftest import pg_home
from tests.support.fake_openai import FakeOpenAI, completion
from tests.support.figures import count as record_figure
from tests.support.flowkit import ledger
from tests.support.helpers import ROOT, tether_cli

FLOWS = "tests.support.flowkit:flows"
KILLS = int(os.environ.get("TETHER_FLOW_KILLS", "6"))
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


def storm_tasks(prefix: str) -> list[dict[str, Any]]:
    """A DAG of 29: a start, four lanes of six calls (one lane shares a resource, one runs inline in the
    executor's own process, inside its decision step), a lane of three agent turns (each asks the model,
    runs one tool, asks again), a join. Ledger keys are ``<prefix>-<id>``."""
    tasks: list[dict[str, Any]] = [
        {"id": "start", "call": {"task": "f.once", "args": {"key": f"{prefix}-start"}}}
    ]
    for lane, task in (("a", "f.once"), ("b", "f.safe"), ("c", "f.arm"), ("i", "f.inline_safe")):
        before = "start"
        for i in range(6):
            task_id = f"{lane}{i}"
            seconds = round(random.uniform(0.05, 0.4), 2)
            tasks.append(
                {
                    "id": task_id,
                    "call": {"task": task, "args": {"key": f"{prefix}-{task_id}", "seconds": seconds}},
                    "depends_on": [before],
                }
            )
            before = task_id
    before = "start"
    for i in range(3):
        tasks.append(
            {"id": f"g{i}", "executor": "agent", "description": f"act once on key {prefix}-g{i}",
             "depends_on": [before]}
        )  # fmt: skip
        before = f"g{i}"
    tasks.append(
        {
            "id": "join",
            "call": {"task": "f.once", "args": {"key": f"{prefix}-join"}},
            "depends_on": ["a5", "b5", "c5", "i5", "g2"],
        }
    )
    return tasks


def agent_model(request: dict[str, Any]) -> dict[str, Any]:
    """The model of the agent lane, answering from the conversation alone (a replay asks again after a
    kill): a task message gets one call of f.once on its key; a tool's result gets the final answer."""
    said = [m for m in request["messages"] if m["role"] != "system"]
    if said[-1]["role"] == "tool":
        return completion(f"done: {json.loads(said[-1]['content']).get('status')}")
    key = re.search(r"key (\S+)", str(said[-1]["content"]))
    assert key is not None, said[-1]
    arguments = json.dumps({"key": key.group(1), "seconds": round(random.uniform(0.05, 0.4), 2)})
    return completion(None, tool_calls=[("c1", "f__once", arguments)])


def model_settings(server: FakeOpenAI) -> str:
    server.responder = agent_model
    return f'[model]\nprovider = "vllm"\nmodel = "qwen2.5"\nbase_url = "{server.url}"\n'


MODEL_ENV = {"TETHER_MODEL_STREAM": "0"}


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        "TETHER_HOME": str(home),
        "TETHER_CLI_SERVER": "0",
        "TETHER_STOP_GRACE_COOPERATIVE_S": "0.5",
        "TETHER_STOP_GRACE_INTERRUPT_S": "0.5",
        **extra,
    }


def _executor(home: Path, args: list[str], extra: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, *args],
        env=_env(home, extra),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _show(home: Path, run_id: str, extra: dict[str, str]) -> dict[str, Any]:
    code, out, err = tether_cli("--registry", FLOWS, "flow", "show", run_id, "--json", home=home, env=extra)
    assert code == 0, err
    return json.loads(out)


def storms(home: Path, tmp_path: Path, kills: int, extra: dict[str, str], seed: int) -> tuple[int, int]:
    """Runs of the storm flow, each under kills, until ``kills`` kills landed; (kills, runs)."""
    random.seed(seed)
    landed = runs = 0
    while landed < kills:
        run = storm(home, tmp_path, f"r{runs}", kills - landed, extra)
        check(home, run, f"r{runs}")
        landed += run["kills_landed"]
        runs += 1
    return landed, runs


def storm(home: Path, tmp_path: Path, prefix: str, kills: int, extra: dict[str, str]) -> dict[str, Any]:
    flow = tmp_path / f"storm-{prefix}.yaml"
    flow.write_text(yaml.safe_dump({"caller": "cli", "max_parallel": 3, "tasks": storm_tasks(prefix)}))
    code, out, err = tether_cli("--registry", FLOWS, "flow", "run", str(flow), "--detach", "--json",
                                home=home, env={"TETHER_CLI_SERVER": "0", **extra})  # fmt: skip
    # --detach with no executor started a background worker: stop it, this test plays the executor.
    assert code == 0, (out, err)
    run_id = json.loads(out)["run_id"]
    _kill_background_workers(home)
    landed = 0
    for _ in range(kills):
        proc = _executor(home, ["flow", "resume", run_id], extra)
        time.sleep(random.uniform(0.6, 3.0))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # the executor only: its workers live on (detached)
            landed += 1
        proc.wait()
        if _show(home, run_id, extra)["status"] != "running":
            break
    deadline = time.monotonic() + 240
    while True:
        run = _show(home, run_id, extra)
        if run["status"] != "running" or time.monotonic() > deadline:
            break
        proc = _executor(home, ["flow", "resume", run_id], extra)
        proc.wait(timeout=240)
    run["kills_landed"] = landed
    return run


def _kill_background_workers(home: Path) -> None:
    import psutil

    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = proc.info["cmdline"] or []
            if "worker" in cmd and "--until-idle" in cmd and str(home) in " ".join(cmd):
                proc.kill()
        except (psutil.Error, TypeError):
            continue


def check(home: Path, run: dict[str, Any], prefix: str) -> None:
    assert run["status"] in ("completed", "waiting_for_human", "failed"), run["status"]
    assert all(t["status"] != "running" for t in run["tasks"]), [
        t for t in run["tasks"] if t["status"] == "running"
    ]
    effects = Counter(str(m["key"]) for m in ledger(home))
    for task in run["tasks"]:
        key = f"{prefix}-{task['id']}"
        if task["id"] in ("start", "join") or task["id"].startswith(("a", "c", "g")):
            assert effects[key] <= 1, f"{key} must run once and ran {effects[key]} times"
        if task["id"].startswith("g"):  # an agent turn: its tool acted once iff the model was told so
            if task["status"] == "completed" and task["message"] == "done: completed":
                assert effects[key] == 1, (
                    f"{key}: the agent saw its tool complete, but it acted {effects[key]}"
                )
            continue
        if task["status"] == "completed":
            assert effects[key] >= 1, f"{key} is completed but never acted"
        if task["status"] == "waiting_for_human":
            assert task["review"]["kind"] in ("unknown", "failed", "breaker", "refused"), task
    # Killing the executor never loses a worker (they are detached): every run completes.
    stuck = [
        (t["id"], t["status"], t["message"], t["steps"]) for t in run["tasks"] if t["status"] != "completed"
    ]
    assert run["status"] == "completed", (prefix, stuck[:3])


def test_a_twenty_task_flow_survives_an_executor_killed_at_random_on_sqlite(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    (home / "settings.toml").write_text(model_settings(fake_openai))
    seed = int(os.environ.get("TETHER_FLOW_SEED", str(random.randrange(1 << 30))))
    landed, runs = storms(home, tmp_path, KILLS, MODEL_ENV, seed)
    record_figure("flow executor kills landed (SQLite)", landed)
    record_figure("flow runs under kills, all completed once (SQLite)", runs)


def test_the_same_storm_on_postgresql(home: Path, tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    with pg_home(home, model_settings(fake_openai)) as database:
        extra = {**database, **MODEL_ENV}
        seed = int(os.environ.get("TETHER_FLOW_SEED", str(random.randrange(1 << 30))))
        landed, runs = storms(home, tmp_path, max(3, KILLS // 2), extra, seed)
        record_figure("flow executor kills landed (PostgreSQL)", landed)
        record_figure("flow runs under kills, all completed once (PostgreSQL)", runs)


def test_an_agent_tasks_call_cut_before_its_worker_began_is_run_again(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Found by the storm above: the executor died after its agent's tool call was on record and before
    the call's worker began. The replayed turn found that call given up and told the model it failed, so
    the task failed (and, once its retries were spent, went to a person). It provably never ran: it runs
    again within the same attempt, and the task completes."""
    (home / "settings.toml").write_text(model_settings(fake_openai))
    flow = tmp_path / "one-agent.yaml"
    tasks = [{"id": "g0", "executor": "agent", "description": "act once on key cut-g0"}]
    flow.write_text(yaml.safe_dump({"caller": "cli", "tasks": tasks}))
    faults = {"TETHER_CLI_SERVER": "0", "TETHER_FAULTS": "executor.before_spawn=kill", **MODEL_ENV}
    code, out, err = tether_cli(
        "--registry", FLOWS, "flow", "run", str(flow), "--json", home=home, env=faults
    )  # fmt: skip
    assert code == -signal.SIGKILL, (code, out, err)
    assert not ledger(home)  # the call was on record, and nothing ran
    code, out, err = tether_cli("--registry", FLOWS, "flow", "list", "--json", home=home, env=MODEL_ENV)
    assert code == 0, err
    (run_id,) = [r["run_id"] for r in json.loads(out)]
    proc = _executor(home, ["flow", "resume", run_id], MODEL_ENV)
    assert proc.wait(timeout=240) == 0
    run = _show(home, run_id, MODEL_ENV)
    (task,) = run["tasks"]
    assert run["status"] == task["status"] == "completed", task
    assert task["message"] == "done: completed", task
    # The same attempt went on: no failure of the task was recorded (a retry would have hidden one).
    assert [s["status"] for s in task["steps"]] == ["completed"], task["steps"]
    assert Counter(str(m["key"]) for m in ledger(home)) == {"cut-g0": 1}
