"""Delegation inside an executor: the delegated turn is a DBOS child workflow of the delegator's turn.
A SIGKILL while the sub-agent's tool runs is resumed by the next executor where it was: no model is
asked twice for what it answered, no tool acts twice, and the person's `tether run` gets the end."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.supervisor.test_engine import _in_background, _stop, _worker, cli, tool_running, use_model
from tests.support.fake_openai import FakeOpenAI, completion
from tests.support.flowkit import ledger
from tests.support.helpers import wait_for as eventually

pytestmark = pytest.mark.timeout(240)


def _team(home: Path) -> None:
    code, _, err = cli(home, "agents", "create", "lead", "-g", "team,f.*", "--json")
    assert code == 0, err
    code, _, err = cli(home, "agents", "create", "helper", "-g", "f.*", "--alias", "帮手", "--json")
    assert code == 0, err


def test_a_delegation_killed_mid_tool_resumes_in_the_next_executor_and_runs_no_tool_twice(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    use_model(home, fake_openai)
    _team(home)
    fake_openai.reply(
        completion(None, tool_calls=[("d1", "agents__delegate", '{"to": "帮手", "request": "do slow"}')])
    )
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__once", '{"key": "slow", "until_file": "go"}')]))
    fake_openai.reply(completion("slow is done, once."))
    fake_openai.reply(completion("helper did slow, once."))
    env = {"TETHER_MODEL_STREAM": "0"}
    first = _worker(home, **env)
    second = None
    follower = _in_background(home, env, "run", "--agent", "lead", "have the helper do slow", "--json")
    try:
        eventually(lambda: tool_running(home), timeout=60, what="the helper's tool to run")
        os.killpg(first.pid, signal.SIGKILL)  # the executor only: the tool's worker has its own group
        first.wait()
        assert len(fake_openai.requests) == 2
        # The lead loses the team grant before the replay: the turn goes on as it began (its agent was
        # read once, as a step), so the replay takes the same steps instead of diverging from them.
        code, _, err = cli(home, "agents", "edit", "lead", "-g", "f.*", "--json")
        assert code == 0, err
        second = _worker(home, **env)
        (home / "go").touch()  # the tool, live across the crash, may end now
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.communicate()
        for proc in (first, second):
            if proc is not None:
                _stop(proc)
    assert follower.returncode == 0, (out, err)
    turn = json.loads(out)
    assert turn["status"] == "completed" and turn["final"] == "helper did slow, once.", turn
    assert len(fake_openai.requests) == 4, "a model call that had answered was asked again"
    assert [e["key"] for e in ledger(home)] == ["slow"], "the tool acted other than once"
    # The helper's model saw only its own grants, the lead's saw the delegation tool.
    lead_tools = {t["function"]["name"] for t in fake_openai.requests[0]["tools"]}
    helper_tools = {t["function"]["name"] for t in fake_openai.requests[1]["tools"]}
    assert "agents__delegate" in lead_tools and "agents__delegate" not in helper_tools
    assert "f__wipe" in helper_tools and "get_task_status" not in helper_tools
    from tether.runtime import Runtime

    with Runtime.open(home) as runtime:
        child = runtime.threads.load(f"{turn['thread_id']}.d1-1")
        assert child is not None and child.agent == "helper"
        kinds = [(s.kind, s.status) for s in runtime.threads.steps(child.thread_id)]
    assert kinds == [
        ("model", "finished"),
        ("tool", "finished"),
        ("model", "finished"),
        ("final", "finished"),
    ]


def test_a_sub_agents_destructive_call_is_asked_in_the_parent_thread_through_the_executor(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    use_model(home, fake_openai)
    _team(home)
    fake_openai.reply(
        completion(None, tool_calls=[("d1", "agents__delegate", '{"to": "helper", "request": "wipe"}')])
    )
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__wipe", '{"key": "disk"}')]))
    fake_openai.reply(completion("wiped."))
    fake_openai.reply(completion("the helper wiped the disk."))
    env = {"TETHER_MODEL_STREAM": "0"}
    worker = _worker(home, **env)
    try:
        code, asked, err = cli(home, "run", "--agent", "lead", "wipe the disk", "--json")
        assert code == 3 and asked["status"] == "needs_confirmation", (asked, err)
        assert "f.wipe" in asked["final"] and "helper" in asked["final"]
        assert ledger(home) == []
        code, done, err = cli(home, "run", "--thread", asked["thread_id"], "--confirm", "--json")
        assert code == 0 and done["final"] == "the helper wiped the disk.", (done, err)
        assert [e["key"] for e in ledger(home)] == ["disk"]
        code, again, err = cli(home, "run", "--thread", asked["thread_id"], "--confirm", "--json")
        assert code == 2 and "not waiting for a confirmation" in again["error"]["message"], (again, err)
    finally:
        _stop(worker)
    assert [e["key"] for e in ledger(home)] == ["disk"]
