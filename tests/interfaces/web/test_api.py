"""The HTTP API of ``tether serve``, from the outside: a real server process on 127.0.0.1, real turns on
the offline model, real workers, the real event log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import _kill_game
from tests.support.helpers import tether_cli, wait_for
from tests.support.webserver import Served, serving, sse_events

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("web") / "home"
    home.mkdir()
    with serving(home, TETHER_DEMO_STEP_S="1.0") as server:
        yield server
    _kill_game(home)


def new_thread(served: Served, title: str = "") -> str:
    return served.post("/api/threads", {"title": title}, expect=201)["thread_id"]


def turn_over(served: Served, thread_id: str, turns: int = 1) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        response = served.http.get(f"/api/threads/{thread_id}")  # 404 until a new thread's turn begins
        thread = response.json() if response.status_code == 200 else {"turns": 0, "running": True}
        return thread if thread["turns"] >= turns and not thread["running"] else None

    return wait_for(done, 60, f"turn {turns} of {thread_id} to end")


def say(served: Served, thread_id: str, text: str) -> dict[str, Any]:
    turns = served.get(f"/api/threads/{thread_id}")["turns"]
    accepted = served.post(f"/api/threads/{thread_id}/messages", {"text": text}, expect=202)
    assert accepted["thread_id"] == thread_id and accepted["request_id"].startswith("turn-")
    return turn_over(served, thread_id, turns + 1)


def test_threads_are_created_paged_renamed_and_deleted(served: Served) -> None:
    made = [new_thread(served, f"paging {n}") for n in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        page = served.get("/api/threads", params={"limit": 2, **({"before": cursor} if cursor else {})})
        assert len(page["items"]) <= 2
        seen += [t["thread_id"] for t in page["items"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert set(made) <= set(seen) and len(seen) == len(set(seen))  # every thread once, none twice
    renamed = served.http.patch(f"/api/threads/{made[0]}", json={"title": "  新的 名字 "})
    assert renamed.status_code == 200 and renamed.json()["title"] == "新的 名字"
    assert served.http.patch(f"/api/threads/{made[0]}", json={"title": "   "}).status_code == 400
    gone = served.http.delete(f"/api/threads/{made[1]}")
    assert gone.status_code == 200 and gone.json() == {
        "thread_id": made[1], "cancelled_turns": 0, "stopped_jobs": [], "removed_files": 0
    }  # fmt: skip
    assert served.http.get(f"/api/threads/{made[1]}").status_code == 404
    assert served.http.delete(f"/api/threads/{made[1]}").status_code == 404


def test_a_message_starts_a_turn_whose_steps_stream_live_and_resume_without_gaps(served: Served) -> None:
    start = served.get("/api/info")["last_event_id"]
    thread = new_thread(served)
    served.post(f"/api/threads/{thread}/messages", {"text": "查看游戏状态"}, expect=202)
    mine = f"thread:{thread}"
    events = sse_events(
        served,
        after=start,
        until=lambda es: any(e["kind"] == "turn_finished" and e["topic"] == mine for e in es),
    )
    kinds = [e["kind"] for e in events if e["topic"] == mine]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_finished"
    assert "tool_started" in kinds and "tool_finished" in kinds
    ids = [e["id"] for e in events]
    assert ids == sorted(set(ids))
    # A page that reconnects with the id it saw last gets exactly the rest, nothing twice.
    cut = events[1]["id"]
    rest = sse_events(served, last_event_id=cut, until=lambda es: es[-1]["id"] >= events[-1]["id"])
    assert [e["id"] for e in rest] == [e["id"] for e in events if e["id"] > cut]
    # The record matches what was streamed.
    messages = served.get(f"/api/threads/{thread}/messages")["items"]
    assert [m["role"] for m in messages] == ["user", "assistant"] and messages[0]["text"] == "查看游戏状态"
    steps = served.get(f"/api/threads/{thread}/steps")["items"]
    assert next(s["kind"] for s in steps) == "model" and any(s["kind"] == "tool" for s in steps)
    assert served.get(f"/api/threads/{thread}/steps", params={"turn": 1})["items"] == steps
    assert served.get(f"/api/threads/{thread}/steps", params={"turn": 2})["items"] == []


def test_a_second_message_while_a_turn_runs_is_refused_not_queued(served: Served) -> None:
    say(served, new_thread(served), "启动游戏")
    thread = new_thread(served)
    served.post(f"/api/threads/{thread}/messages", {"text": "每日实训"}, expect=202)
    second = served.http.post(f"/api/threads/{thread}/messages", json={"text": "查看游戏状态"})
    assert second.status_code == 409, second.text
    assert second.json()["detail"]["code"] == "conflict"
    turn_over(served, thread)
    assert served.get(f"/api/threads/{thread}")["turns"] == 1


def test_a_confirmation_runs_exactly_the_call_asked_about_once_and_a_denial_runs_nothing(
    served: Served,
) -> None:
    say(served, new_thread(served), "启动游戏")

    def salvaged() -> list[dict[str, Any]]:
        jobs = served.get("/api/jobs", params={"limit": 200})["items"]
        return [j for j in jobs if j["task_id"] == "demo.salvage_relics" and j["status"] == "completed"]

    before = salvaged()
    asked = new_thread(served)
    thread = say(served, asked, "分解四星遗器")
    pending = thread["pending"]
    assert (
        pending is not None
        and pending["tool"] == "demo.salvage_relics"
        and pending["danger"] == "destructive"
    )
    assert pending["args"] == {"rarity": 4} and pending["question"]
    listed = served.get("/api/confirmations")["items"]
    assert any(c["pending_id"] == pending["pending_id"] and c["thread_id"] == asked for c in listed)
    # An answer to another question id is refused; the right one runs the call.
    wrong = served.http.post(f"/api/threads/{asked}/confirmations/{asked}:9:9/approve")
    assert wrong.status_code == 404
    served.post(f"/api/threads/{asked}/confirmations/{pending['pending_id']}/approve", expect=202)
    done = turn_over(served, asked, 2)
    assert done["pending"] is None
    ran = salvaged()
    assert len(ran) == len(before) + 1 and ran[0]["data"].get("confirmed_by") == "person:web"
    # Approving again answers nothing: the question is gone.
    again = served.http.post(f"/api/threads/{asked}/confirmations/{pending['pending_id']}/approve")
    assert again.status_code == 404
    # Deny another: nothing runs.
    denied = new_thread(served)
    pending = say(served, denied, "分解三星遗器")["pending"]
    served.post(f"/api/threads/{denied}/confirmations/{pending['pending_id']}/deny", expect=202)
    assert turn_over(served, denied, 2)["pending"] is None
    assert len(salvaged()) == len(ran)


def test_a_background_job_reports_progress_live_and_stops_from_the_api(served: Served) -> None:
    say(served, new_thread(served), "启动游戏")
    start = served.get("/api/info")["last_event_id"]
    thread = new_thread(served)
    say(served, thread, "后台一直刷金币")
    jobs = served.get("/api/jobs", params={"active": True})["items"]
    job = next(j for j in jobs if j["data"]["origin"] == f"thread:{thread}")
    eid = job["execution_id"]
    progress = sse_events(
        served,
        after=start,
        until=lambda es: sum(1 for e in es if e["kind"] == "tool_progress" and e["execution_id"] == eid) >= 2,
    )
    moved = [e for e in progress if e["kind"] == "tool_progress" and e["execution_id"] == eid]
    assert all(e["topic"] == f"thread:{thread}" for e in moved) and moved[-1]["message"]
    assert served.get(f"/api/jobs/{eid}")["status"] == "running"
    assert served.get(f"/api/jobs/{eid[:8]}")["execution_id"] == eid  # a unique prefix names it
    stopped = served.post(f"/api/jobs/{eid}/stop")
    assert stopped["status"] == "stopped", stopped
    log = served.get(f"/api/jobs/{eid}/log", params={"lines": 5})
    assert log["execution_id"] == eid and isinstance(log["text"], str)
    assert served.http.get("/api/jobs/no-such-job").status_code == 404
    assert served.http.post("/api/jobs/no-such-job/stop").status_code == 404


def farming(served: Served, thread: str) -> dict[str, Any] | None:
    """The farm job of ``thread``'s running turn, once it runs."""
    steps = served.get(f"/api/threads/{thread}/steps")["items"]
    started = [s for s in steps if s["tool"] == "demo.farm_instance" and s["status"] == "started"]
    if not started or not started[0]["execution_id"]:
        return None
    job = served.http.get(f"/api/jobs/{started[0]['execution_id']}")
    return job.json() if job.status_code == 200 and job.json()["status"] == "running" else None


def test_a_running_turn_is_cancelled_from_the_api_and_its_job_is_stopped(served: Served) -> None:
    """As Ctrl-C does in the CLI: the turn ends at once, the job it waits on is stopped (through the
    executor, as the caller web), nothing of it runs again, and the conversation goes on."""
    say(served, new_thread(served), "启动游戏")
    thread = new_thread(served)
    start = served.get("/api/info")["last_event_id"]
    served.post(f"/api/threads/{thread}/messages", {"text": "刷 30 次金币副本"}, expect=202)
    job = wait_for(lambda: farming(served, thread), 60, "the farm job to run")
    eid = job["execution_id"]
    cancelled = served.post(f"/api/threads/{thread}/turn/cancel")
    assert cancelled == {"thread_id": thread, "turn": 1, "cancelled": True, "stopped_jobs": [eid]}, cancelled
    stopped = served.get(f"/api/jobs/{eid}")
    assert stopped["status"] == "stopped" and "cancelled" in stopped["message"], stopped
    assert served.get(f"/api/threads/{thread}")["running"] is False
    messages = served.get(f"/api/threads/{thread}/messages")["items"]
    assert messages[-1]["role"] == "assistant" and messages[-1]["status"] == "interrupted"
    assert "取消" in messages[-1]["text"], messages[-1]  # said in the language of the message
    events = sse_events(served, after=start, until=lambda es: any(
        e["kind"] == "turn_finished" and e["topic"] == f"thread:{thread}" for e in es))  # fmt: skip
    assert next(e for e in events if e["kind"] == "turn_finished")["status"] == "interrupted"
    # Nothing to cancel now; the conversation goes on, and the farm never runs again.
    again = served.post(f"/api/threads/{thread}/turn/cancel")
    assert again == {"thread_id": thread, "turn": None, "cancelled": False, "stopped_jobs": []}
    done = say(served, thread, "查看游戏状态")
    assert done["turns"] == 2
    assert served.get(f"/api/threads/{thread}/messages")["items"][-1]["status"] == "completed"
    farms = served.get("/api/jobs", params={"origin": f"thread:{thread}", "limit": 50})["items"]
    assert [j["execution_id"] for j in farms if j["task_id"] == "demo.farm_instance"] == [eid]
    assert served.http.post("/api/threads/no-such-thread/turn/cancel").status_code == 404


def test_ctrl_c_on_a_turn_handed_to_the_server_cancels_it_there(served: Served) -> None:
    """`tether run` while `tether serve` runs hands the turn over and follows it: its Ctrl-C cancels the
    turn there (it went on running, its job too, once the command had gone)."""
    say(served, new_thread(served), "启动游戏")
    env = {**os.environ, "TETHER_HOME": str(served.home), "TETHER_CLI_SERVER": "0"}
    command = [
        sys.executable,
        "-m",
        "tether.interfaces.cli",
        "run",
        "刷 30 次金币副本",
        "--new-thread",
        "cli-c",
    ]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job = wait_for(
            lambda: served.http.get("/api/threads/cli-c").status_code == 200 and farming(served, "cli-c"),
            60,
            "the handed-over turn's farm job to run",
        )
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and "turn cancelled" in err and "Traceback" not in err, err
    assert served.get("/api/threads/cli-c")["running"] is False
    assert served.get(f"/api/jobs/{job['execution_id']}")["status"] == "stopped"
    assert served.get("/api/threads/cli-c/messages")["items"][-1]["status"] == "interrupted"


def test_deleting_a_thread_stops_its_jobs_and_its_records_go(served: Served) -> None:
    say(served, new_thread(served), "启动游戏")
    thread = new_thread(served)
    say(served, thread, "后台一直刷金币")
    active = served.get("/api/jobs", params={"active": True, "origin": f"thread:{thread}"})["items"]
    assert len(active) == 1
    gone = served.http.delete(f"/api/threads/{thread}").json()
    assert gone["stopped_jobs"] == [active[0]["execution_id"]]
    assert served.get(f"/api/jobs/{active[0]['execution_id']}")["status"] == "stopped"
    assert served.http.get(f"/api/threads/{thread}/messages").status_code == 404
    # Its id is never given out again: a new thread under it would adopt the old one's results (its
    # execution ids derive from thread, turn and step) and answer the old one's questions.
    again = served.http.post(f"/api/threads/{thread}/messages", json={"text": "查看游戏状态"})
    assert again.status_code == 400 and "was deleted" in again.json()["detail"]["message"]
    code, _, err = tether_cli("run", "查看游戏状态", "--new-thread", thread, home=served.home)
    assert code != 0 and "was deleted" in err


def test_a_question_asked_inside_a_goal_run_is_not_answered_as_a_conversation(served: Served) -> None:
    """An agent task's thread (run-<execution id>) belongs to its run: its question is settled by the
    run's policy, never approved as a conversation turn (that would run it outside the run)."""
    from tether.runtime import Runtime
    from tether.store.threads import ThreadState

    pending = {"id": "run-agentish:1:1", "tool": "demo.salvage_relics", "name": "demo__salvage_relics",
               "args": {"rarity": 4}, "digest": "x", "danger": "destructive"}  # fmt: skip
    with Runtime.open(served.home) as runtime:  # as an agent task's turn leaves it
        runtime.threads.save(ThreadState(thread_id="run-agentish", title="agent", turns=1, pending=pending))
    assert served.get("/api/threads/run-agentish")["pending"] is None  # not offered
    assert all(c["thread_id"] != "run-agentish" for c in served.get("/api/confirmations")["items"])
    refused = served.http.post("/api/threads/run-agentish/confirmations/run-agentish:1:1/approve")
    assert refused.status_code == 404
    for text in ("是", "yes"):  # nor by a message that would answer it
        said = served.http.post("/api/threads/run-agentish/messages", json={"text": text})
        assert said.status_code == 400 and "goal run" in said.json()["detail"]["message"]
    for args in (("--thread", "run-agentish", "--confirm"), ("是", "--thread", "run-agentish")):
        code, _, err = tether_cli("run", *args, home=served.home)
        assert code == 2 and "goal run" in err, err
    code, _, err = tether_cli("run", "hi", "--new-thread", "run-mine", home=served.home)
    assert code == 2 and "goal runs" in err
    code, out, _ = tether_cli("approvals", "--json", home=served.home)
    assert all(r["thread_id"] != "run-agentish" for r in json.loads(out)["items"])


def test_a_turn_handed_over_by_tether_run_in_a_terminal_shows_up_live(served: Served) -> None:
    start = served.get("/api/info")["last_event_id"]
    code, _out, err = tether_cli(
        "run", "查看游戏状态", "--new-thread", "from-terminal", "--json", home=served.home
    )
    assert code == 0, err
    events = sse_events(
        served,
        after=start,
        until=lambda es: any(
            e["kind"] == "turn_finished" and e["topic"] == "thread:from-terminal" for e in es
        ),
    )
    assert any(e["kind"] == "turn_started" and e["thread_id"] == "from-terminal" for e in events)
    assert served.get("/api/threads/from-terminal")["turns"] == 1


def test_a_goal_run_goes_through_its_review_point_from_the_api(served: Served) -> None:
    run = served.post("/api/runs", {"goal": "启动游戏，然后分解四星遗器"}, expect=201)
    run_id = run["run_id"]
    tasks = {t["task_id"]: t for t in run["tasks"]}
    assert len(tasks) == 2
    second = run["tasks"][1]
    assert second["needs"] == [run["tasks"][0]["task_id"]] and second["call"]["task"] == "demo.salvage_relics"

    def waiting() -> dict[str, Any] | None:
        found = served.get(f"/api/runs/{run_id}")
        return found if found["status"] == "waiting_for_human" else None

    found = wait_for(waiting, 60, "the run to wait at its review point")
    paused = next(t for t in found["tasks"] if t["status"] == "waiting_for_human")
    assert paused["review"]["kind"] == "before"
    listed = next(r for r in served.get("/api/runs")["items"] if r["run_id"] == run_id)
    assert listed["tasks_total"] == 2 and listed["tasks_done"] == 1  # started the game; the rest waits
    # The review point is listed where the page's Approvals reads what waits for a person.
    reviews = [r for r in served.get("/api/reviews")["items"] if r["run_id"] == run_id]
    assert [(r["task"]["task_id"], r["goal"]) for r in reviews] == [(paused["task_id"], run["goal"])]
    wrong = served.http.post(f"/api/runs/{run_id}/tasks/nope/approve", json={})
    assert wrong.status_code == 400 and "no task" in wrong.json()["detail"]["message"]
    served.post(f"/api/runs/{run_id}/tasks/{paused['task_id']}/approve", {"reason": "ok"})

    def over() -> dict[str, Any] | None:
        found = served.get(f"/api/runs/{run_id}")
        return found if found["status"] == "completed" else None

    done = wait_for(over, 60, "the run to complete")
    assert all(t["status"] == "completed" for t in done["tasks"])
    assert not [r for r in served.get("/api/reviews")["items"] if r["run_id"] == run_id]
    assert served.http.post(f"/api/runs/{run_id}/cancel").status_code == 400  # over already
    resumed = served.post(f"/api/runs/{run_id}/resume")
    assert resumed["run"]["status"] == "completed" and "nothing to resume" in resumed["done"]


def test_a_goal_run_is_cancelled_and_resumed_from_the_api(served: Served) -> None:
    run = served.post("/api/runs", {"goal": "启动游戏，然后分解四星遗器"}, expect=201)
    run_id = run["run_id"]
    wait_for(lambda: served.get(f"/api/runs/{run_id}")["status"] == "waiting_for_human", 60, "review point")
    cancelled = served.post(f"/api/runs/{run_id}/cancel")
    assert cancelled["status"] == "cancelled"
    resumed = served.post(f"/api/runs/{run_id}/resume")
    assert resumed["run"]["status"] in ("running", "waiting_for_human"), resumed
    wait_for(lambda: served.get(f"/api/runs/{run_id}")["status"] == "waiting_for_human", 60, "review again")
    served.post(f"/api/runs/{run_id}/tasks/{run['tasks'][1]['task_id']}/reject", {})
    wait_for(lambda: served.get(f"/api/runs/{run_id}")["status"] != "waiting_for_human", 60, "the run to end")


def test_bad_identifiers_and_bodies_get_clear_errors_never_a_traceback(served: Served) -> None:
    for path in (
        "/api/threads/..%2F..%2Fetc",
        "/api/threads/a%20b/messages",
        "/api/jobs/..%2Fsecret/log",
        "/api/runs/-x",
        "/api/threads/" + "a" * 300,
    ):
        response = served.http.get(path)
        assert response.status_code in (404, 422), (path, response.status_code)
        assert "Traceback" not in response.text
    assert served.http.get("/static/../app.py").status_code == 404
    assert served.http.get("/static/%2e%2e/app.py").status_code == 404
    bad = served.http.post(
        "/api/threads/x/messages", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert bad.status_code == 422
    assert served.http.post("/api/threads/nope-thread/messages", json={"text": ""}).status_code == 422
    assert served.http.get("/api/events", params={"topic": "evil"}).status_code == 400
    assert served.http.get("/api/events", headers={"Last-Event-ID": "x1"}).status_code == 400
    assert served.http.get("/api/threads", params={"before": "garbage"}).status_code == 400
    # Input that does not even encode, or overflows the database's integers: a 4xx, never a 500.
    for path in ("/api/threads", "/api/runs"):
        lone = served.http.post(path, content=b'{"title": "\\ud800", "goal": "\\ud800"}',
                                headers={"content-type": "application/json"})  # fmt: skip
        assert lone.status_code == 422, (path, lone.status_code, lone.text)
    thread = new_thread(served)
    assert served.http.get(f"/api/threads/{thread}/steps", params={"turn": 10**25}).status_code == 422
    assert served.http.get("/api/events", params={"after": 10**25}).status_code == 422
    assert served.http.get("/api/events", headers=[(b"Last-Event-ID", b"\xb2")]).status_code == 400
    assert served.http.post("/api/runs", json={"goal": "   "}).status_code == 400


@pytest.mark.parametrize(("goal", "words"), [("a", "can't do"), ("的", "做不到"), ("ok ?", "can't do")])
def test_a_goal_with_nothing_to_do_is_a_clear_400_not_a_server_error(
    served: Served, goal: str, words: str
) -> None:
    before = len(served.get("/api/runs", params={"limit": 200})["items"])
    refused = served.http.post("/api/runs", json={"goal": goal})
    assert refused.status_code == 400, refused.text
    assert refused.json()["detail"]["code"] == "invalid" and words in refused.json()["detail"]["message"]
    assert len(served.get("/api/runs", params={"limit": 200})["items"]) == before  # no run was made


def test_the_cli_does_what_the_page_does(served: Served) -> None:
    """CLI parity for what is new with the page: pending approvals, a job's log, the event log."""
    say(served, new_thread(served), "启动游戏")
    asked = new_thread(served)
    say(served, asked, "分解四星遗器")
    code, out, _ = tether_cli("approvals", "--json", home=served.home)
    assert code == 0
    rows = json.loads(out)["items"]
    assert any(r["thread_id"] == asked and r["tool"] == "demo.salvage_relics" for r in rows)
    served.post(f"/api/threads/{asked}/confirmations/{rows[0]['pending_id']}/deny", expect=202)
    turn_over(served, asked, 2)
    code, out, _ = tether_cli("events", "--topic", f"thread:{asked}", home=served.home)
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert kinds.count("turn_started") == 2 and "confirmation_answered" in kinds
    job = served.get("/api/jobs", params={"limit": 1})["items"][0]
    code, out, _ = tether_cli("job", "log", job["execution_id"], "--json", home=served.home)
    assert code == 0 and json.loads(out)["execution_id"] == job["execution_id"]
    code, out, _ = tether_cli("job", "log", "nope-nope", "--json", home=served.home)
    assert code == 2 and json.loads(out)["error"]["code"] == "not_found"
    # Threads: rename and delete from the CLI too.
    code, _, err = tether_cli("threads", "rename", asked, "从终端改名", home=served.home)
    assert code == 0, err
    assert served.get(f"/api/threads/{asked}")["title"] == "从终端改名"
    code, _, err = tether_cli("threads", "delete", asked, home=served.home)
    assert code == 0, err
    assert served.http.get(f"/api/threads/{asked}").status_code == 404


def test_agents_are_made_changed_and_given_threads_from_the_api(served: Served) -> None:
    listed = served.get("/api/agents")
    assert [a["name"] for a in listed["items"]][:1] == ["assistant"] and listed["items"][0]["builtin"]
    assert "workspace.*" in listed["bundles"]["files"]
    made = served.post(
        "/api/agents", {"name": "scout", "grants": ["research"], "aliases": ["侦察员"]}, expect=201
    )
    assert made["tasks"][0] == "web.*" and made["aliases"] == ["侦察员"]
    twice = served.http.post("/api/agents", json={"name": "scout"})
    assert twice.status_code == 400 and "exists already" in twice.json()["detail"]["message"]
    bad = served.http.post("/api/agents", json={"name": "odd", "grants": ["rm -rf /"]})
    assert bad.status_code == 400 and "files" in bad.json()["detail"]["message"]
    assert served.http.post("/api/agents", json={"name": "Bad Name"}).status_code == 422
    changed = served.http.patch("/api/agents/scout", json={"description": "looks things up"})
    assert changed.status_code == 200 and changed.json()["description"] == "looks things up"
    assert served.http.patch("/api/agents/nobody", json={"description": "x"}).status_code == 404
    thread = served.post("/api/threads", {"agent": "scout"}, expect=201)
    assert thread["agent"] == "scout"
    unknown = served.http.post("/api/threads", json={"agent": "nobody"})
    assert unknown.status_code == 400 and "scout" in unknown.json()["detail"]["message"]
    after = say(served, thread["thread_id"], "hello")
    assert after["agent"] == "scout" and after["turns"] == 1
    plain = served.post("/api/threads", {}, expect=201)
    assert plain["agent"] == "assistant"
    assert served.http.delete("/api/agents/scout").json() == {"name": "scout"}
    assert served.http.get("/api/agents/scout").status_code == 404


def test_a_message_with_images_is_checked_kept_and_answered(served: Served) -> None:
    import base64

    from tests.agent.test_images import PNG

    thread = new_thread(served)
    fake = served.http.post(
        f"/api/threads/{thread}/messages",
        json={
            "text": "what is this?",
            "images": [{"name": "x.png", "data": base64.b64encode(b"<svg/>").decode()}],
        },
    )
    assert fake.status_code == 400 and "PNG, JPEG, GIF or WebP" in fake.json()["detail"]["message"]
    broken = served.http.post(
        f"/api/threads/{thread}/messages", json={"text": "x", "images": [{"data": "%%%"}]}
    )
    assert broken.status_code == 400 and "base64" in broken.json()["detail"]["message"]
    served.post(
        f"/api/threads/{thread}/messages",
        {"text": "what is this?", "images": [{"name": "dot.png", "data": base64.b64encode(PNG).decode()}]},
        expect=202,
    )
    turn_over(served, thread)
    answer = served.get(f"/api/threads/{thread}/messages")["items"][-1]
    assert answer["status"] == "failed" and "cannot see images" in answer["text"]
    # A body with images may be larger than other bodies, and is still bounded.
    huge = "A" * (29 * 1024 * 1024)
    assert (
        served.http.post(
            f"/api/threads/{thread}/messages", json={"text": "x", "images": [{"data": huge}]}
        ).status_code
        == 413
    )


def test_memory_is_listed_searched_and_forgotten_and_a_thread_made_private_from_the_api(
    served: Served,
) -> None:
    served.http.patch("/api/agents/assistant", json={"grants": ["all", "memory"]})

    def turns() -> int:  # (the server is shared with other tests: their turns are remembered too)
        return int(served.get("/api/memory")["counts"]["turn"])

    before = turns()
    noted = new_thread(served)
    say(served, noted, "记住：我的经理叫王芳")
    chat = new_thread(served)
    say(served, chat, "查看游戏状态")
    listed = served.get("/api/memory")
    assert [f["text"] for f in listed["facts"]] == ["我的经理叫王芳"] and turns() == before + 1
    hits = served.get("/api/memory?q=经理叫什么")["hits"]
    assert hits[0]["kind"] == "fact" and hits[0]["thread_id"] == noted
    assert served.http.get("/api/memory?q=x&agent=nobody").status_code == 400
    assert served.http.get("/api/memory?q=").status_code == 422
    assert served.http.delete(f"/api/memory/{hits[0]['id']}").json() == {"forgotten": hits[0]["id"]}
    assert served.http.delete(f"/api/memory/{hits[0]['id']}").status_code == 404
    assert served.get("/api/memory")["facts"] == []
    # Private: what the thread said is forgotten, and nothing more from it is kept.
    changed = served.http.patch(f"/api/threads/{chat}", json={"private": True})
    assert changed.status_code == 200 and changed.json()["private"] is True
    assert turns() == before
    say(served, chat, "查看游戏状态")
    assert turns() == before
    assert served.http.patch(f"/api/threads/{chat}", json={}).status_code == 400
    # A deleted thread's memories go with it.
    say(served, noted, "查看游戏状态")
    assert turns() == before + 1
    served.http.delete(f"/api/threads/{noted}")
    assert turns() == before
    served.http.patch("/api/agents/assistant", json={"grants": ["all"]})


def test_signals_decisions_ratings_and_schedules_from_the_api(served: Served) -> None:
    fired = served.http.post(
        "/api/signals", json={"text": "the nightly backup failed", "source": "backup.sh"}
    )
    assert fired.status_code == 200, fired.text
    decision = fired.json()
    assert decision["fired"] and decision["thread_id"] == "notices-assistant" and decision["message"]
    silent = served.http.post("/api/signals", json={"text": "heartbeat: nothing new"}).json()
    assert not silent["fired"] and silent["message"] is None
    listed = served.get("/api/initiative?limit=5")["decisions"]
    assert [d["id"] for d in listed[:2]] == [silent["id"], decision["id"]]
    assert served.get("/api/initiative?fired=true")["decisions"][0]["id"] == decision["id"]
    rated = served.http.post(f"/api/initiative/{decision['id']}/rating", json={"rating": -1, "note": "later"})
    assert rated.status_code == 200 and rated.json()["rating"] == -1 and rated.json()["agent_threshold"] > 0.5
    served.http.post(f"/api/initiative/{decision['id']}/rating", json={"rating": 1})  # undone, then 👍
    assert served.http.post(f"/api/initiative/{silent['id']}/rating", json={"rating": 1}).status_code == 400
    assert served.http.post("/api/initiative/999999/rating", json={"rating": 1}).status_code == 404
    assert served.http.post(f"/api/initiative/{decision['id']}/rating", json={"rating": 5}).status_code == 422
    assert served.http.post("/api/signals", json={"text": "x", "kind": "schedule"}).status_code == 422
    assert served.http.post("/api/signals", json={"text": "x", "agent": "nobody"}).status_code == 400
    # Schedules: added, listed, fired now (the server is an executor), removed.
    made = served.http.post(
        "/api/schedules", json={"name": "plants", "cron": "0 9 * * *", "remind": "water the plants 浇花"}
    )
    assert made.status_code == 200 and made.json()["action"] == "remind"
    assert served.http.post("/api/schedules", json={"name": "plants", "cron": "0 9 * * *"}).status_code == 400
    assert served.http.post("/api/schedules", json={"name": "x", "cron": "soon"}).status_code == 400
    assert [s["name"] for s in served.get("/api/schedules")["schedules"]] == ["plants"]
    assert served.http.post("/api/schedules/plants/run").status_code == 200

    def reminded() -> bool:
        found = served.get("/api/initiative")["decisions"]
        return any(d["kind"] == "schedule" and d["message"] for d in found)

    wait_for(reminded, timeout=60, what="the reminder fired now")
    assert served.http.delete("/api/schedules/plants").json() == {"removed": "plants"}
    assert served.http.delete("/api/schedules/plants").status_code == 404
    assert served.http.post("/api/schedules/plants/run").status_code == 400
