"""State converges across crashes of ``tether serve``: a turn left running by a dead process is marked
interrupted when the server starts (the page never waits on it), and a turn the server was running
when it was killed is resumed by the next server from its last step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import wait_for
from tests.support.webserver import serving, start
from tether.runtime import Runtime

pytestmark = pytest.mark.slow


def test_a_turn_left_running_by_a_dead_process_is_interrupted_at_start_up(home: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with Runtime.open(home) as runtime:
        number = runtime.threads.begin_turn("crashed", "查看游戏状态", (dead.pid, 1.0), lambda *_: False)
        assert number == 1
    with serving(home) as served:
        assert any("interrupted" in line for line in served.output)
        thread = served.get("/api/threads/crashed")
        assert thread["running"] is False
        messages = served.get("/api/threads/crashed/messages")["items"]
        assert [m["status"] for m in messages] == ["interrupted", "interrupted"]
        served.post("/api/threads/crashed/messages", {"text": "查看游戏状态"}, expect=202)
        wait_for(lambda: served.get("/api/threads/crashed")["turns"] == 2 and not served.get(
            "/api/threads/crashed")["running"], 60, "the next turn")  # fmt: skip
        statuses = [m["status"] for m in served.get("/api/threads/crashed/messages")["items"]]
        assert statuses[-1] == "completed"


@pytest.mark.timeout(240)
def test_a_turn_the_server_ran_when_it_was_killed_is_resumed_by_the_next_server(home: Path) -> None:
    env = {"TETHER_DEMO_STEP_S": "1.5"}
    first = start(home, **env)
    try:
        first.post("/api/threads", {"title": "k"}, expect=201)
        thread = first.get("/api/threads")["items"][0]["thread_id"]
        first.post(f"/api/threads/{thread}/messages", {"text": "启动游戏，然后每日实训"}, expect=202)

        def training() -> bool:
            """The training step is on record as started and its worker runs (past its handshake): the
            kill lands mid-job, not in the moment before the worker began (a different outcome)."""
            steps = first.get(f"/api/threads/{thread}/steps")["items"]
            started = [s for s in steps if s["tool"] == "demo.daily_training" and s["status"] == "started"]
            if not started or not started[0]["execution_id"]:
                return False
            job = first.http.get(f"/api/jobs/{started[0]['execution_id']}")
            return job.status_code == 200 and job.json()["status"] == "running"

        wait_for(training, 60, "the training job to run")
    finally:
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=10)
        first.http.close()
        if first.proc.stdout is not None:
            first.proc.stdout.close()
    with serving(home, **env) as second:

        def over() -> bool:
            found = second.get(f"/api/threads/{thread}")
            return not found["running"] and found["turns"] == 1

        wait_for(over, 90, "the resumed turn to end")
        messages = second.get(f"/api/threads/{thread}/messages")["items"]
        assert messages[-1]["status"] == "completed", messages
        steps = second.get(f"/api/threads/{thread}/steps")["items"]
        trained = [s for s in steps if s["tool"] == "demo.daily_training"]
        assert len(trained) == 1 and trained[0]["status"] == "finished"
        jobs = second.get("/api/jobs", params={"limit": 50})["items"]
        assert len([j for j in jobs if j["task_id"] == "demo.daily_training"]) == 1  # it ran once
