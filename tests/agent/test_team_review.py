"""What the second review of the team found, each reproduced: a sub-agent's second question, a "no" that
let the sub-agent go on unseen, a delegation interrupted by a crash reported as not run, any provider's
model reachable by name, a skill's run that forgot how deep its chain was, and child threads a person
could take first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.agent.test_team import make_team
from tests.support.helpers import ROOT, exited, wait_for
from tether.agent.roster import agent_of, session_for, team_of
from tether.config import AgentSettings
from tether.errors import ConfigError
from tether.execution.admission import execution_id_for
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths, read_claim
from tether.models.offline import OfflineModel
from tether.store.agents import AgentRecord
from tether.testing import ScriptedModel, call, calls, say
from tether.toolkits.standard import registry as standard


@pytest.fixture
def team_executor(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor(standard)


def _janitor_team(executor: Executor, home: Path, *files: str) -> Path:
    agents = executor.runtime.agents
    agents.create(AgentRecord(name="boss", grants=("team", "files"), model="m-boss"))
    agents.create(AgentRecord(name="janitor", grants=("files",), model="m-janitor"))
    workspace = home / "workspace"
    workspace.mkdir(mode=0o700, exist_ok=True)
    for name in files:
        (workspace / name).write_text(name)
    return workspace


def test_a_sub_agents_second_question_is_asked_after_the_first_yes(
    team_executor: Executor, home: Path
) -> None:
    workspace = _janitor_team(team_executor, home, "a.txt", "b.txt")
    boss = ScriptedModel(
        [
            calls(call("agents__delegate", {"to": "janitor", "request": "delete a.txt and b.txt"})),
            say("both gone"),
        ]
    )
    janitor = ScriptedModel(
        [
            calls(call("workspace__delete", {"path": "a.txt"})),
            calls(call("workspace__delete", {"path": "b.txt"})),
            say("Deleted both."),
        ]
    )
    team = make_team(team_executor, {"m-boss": boss, "m-janitor": janitor})
    session = session_for(team, agent_of(team, "boss"))
    assert session.send_sync("two-1", "tidy").status.value == "needs_confirmation"
    second = session.send_sync("two-1", "yes")
    # The sub-agent's next question is asked here, bound to its own call: not recorded as a refusal.
    assert second.status.value == "needs_confirmation", second.final
    assert "b.txt" in second.final and not (workspace / "a.txt").exists() and (workspace / "b.txt").exists()
    pending = session.pending("two-1")
    assert pending is not None and pending["args"]["path"] == "b.txt" and pending.get("delegated")
    done = session.send_sync("two-1", "yes")
    assert done.status.value == "completed" and done.final == "both gone"
    assert not (workspace / "b.txt").exists()
    boss.assert_consumed()
    janitor.assert_consumed()


def test_after_no_the_sub_agent_does_nothing_more(team_executor: Executor, home: Path) -> None:
    workspace = _janitor_team(team_executor, home, "x.txt")
    boss = ScriptedModel(
        [calls(call("agents__delegate", {"to": "janitor", "request": "delete x.txt"})), say("Not deleted.")]
    )
    janitor = ScriptedModel(
        [
            calls(call("workspace__delete", {"path": "x.txt"})),
            calls(call("workspace__write", {"path": "y.txt", "content": "unseen"})),
            say("wrote y instead"),
        ]
    )
    team = make_team(team_executor, {"m-boss": boss, "m-janitor": janitor})
    session = session_for(team, agent_of(team, "boss"))
    session.send_sync("no-1", "tidy")
    declined = session.send_sync("no-1", "no")
    assert declined.final == "Not deleted."
    assert (workspace / "x.txt").exists() and not (workspace / "y.txt").exists()
    assert len(janitor.requests) == 1  # the sub-agent's model was not asked to go on
    child = team_executor.runtime.threads
    last = child.turn("no-1.d1-1", 2)
    assert last is not None and last.status == "completed" and "declined" in last.final


def test_to_reaches_only_models_the_person_configured(team_executor: Executor) -> None:
    team = team_of(team_executor, lambda name: OfflineModel())
    assert team.known_models("offline")
    # A preset provider's model is not a model this home uses: it resolves to the default, said so.
    assert not team.known_models("openai/gpt-4o") and not team.known_models("deepseek/deepseek-reasoner")
    team_executor.runtime.agents.create(
        AgentRecord(name="deep", grants=("files",), model="deepseek/deepseek-chat")
    )
    assert team.known_models("deepseek/deepseek-chat")  # an agent's model: the person chose it
    allowed = team_of(team_executor, lambda name: OfflineModel())
    allowed.settings = AgentSettings(delegation_models=["openai/gpt-4o-mini"])
    assert allowed.known_models("openai/gpt-4o-mini") and not allowed.known_models("openai/gpt-4o")
    with pytest.raises(ConfigError, match="delegation_models"):
        AgentSettings(delegation_models=["not a model name!"])


def test_a_skills_run_keeps_the_chain_it_was_started_in(team_executor: Executor, home: Path) -> None:
    from tests.agent.test_team import _skill
    from tether.supervisor.skillflows import start_skill_flow
    from tether.supervisor.turns import lineage_of

    _skill(home, "check-game", "tasks:\n  - id: look\n    call: {task: demo.status}\n")
    agents = team_executor.runtime.agents
    agents.create(AgentRecord(name="boss", grants=("team", "automation", "skills.run"), model="m-boss"))
    agents.create(AgentRecord(name="runner", grants=("automation", "skills.run"), model="m-run"))
    boss = ScriptedModel([calls(call("agents__delegate", {"to": "runner", "request": "run it"})), say("ok")])
    runner = ScriptedModel([calls(call("skills__run", {"skill": "check-game"})), say("started")])
    team = make_team(team_executor, {"m-boss": boss, "m-run": runner})
    team.start_flow = lambda *a, **k: start_skill_flow(team_executor.runtime, team_executor.registry, *a, **k)
    session_for(team, agent_of(team, "boss")).send_sync("ch-1", "go")
    runs = team_executor.runtime.runs.list()
    assert len(runs) == 1 and runs[0].plan["chain"] == ["boss", "runner"]
    # An agent task of that run stands one hop further down the same chain: depth and loops count it.
    lineage = lineage_of({"chain": runs[0].plan["chain"], "caller": "agent"}, "helper", None)
    assert lineage.chain == ("boss", "runner", "helper") and lineage.depth == 2


def test_a_child_thread_id_cannot_be_taken_first(team_executor: Executor, home: Path) -> None:
    _janitor_team(team_executor, home)
    threads = team_executor.runtime.threads
    grabbed = ScriptedModel([say("mine")])
    from tether.agent.session import ConversationSession

    ConversationSession(team_executor, grabbed).send_sync("c1.d1-1", "I was here first")
    boss = ScriptedModel(
        [calls(call("agents__delegate", {"to": "janitor", "request": "list"})), say("reported")]
    )
    janitor = ScriptedModel([say("never asked")])
    team = make_team(team_executor, {"m-boss": boss, "m-janitor": janitor})
    result = session_for(team, agent_of(team, "boss")).send_sync("c1", "go")
    delegated = next(s.result for s in result.steps if s.kind == "tool" and s.result)
    assert delegated["status"] == "failed" and "not this delegation's" in delegated["message"]
    assert janitor.requests == [] and [t.message for t in threads.turns("c1.d1-1")] == ["I was here first"]
    # A delegation's thread stays that delegation's: neither a person nor another step takes it.
    threads.assign("c1.d2-1", "janitor", "c1:2:1")
    with pytest.raises(ConfigError, match="delegation"):
        threads.assign("c1.d2-1", "janitor")
    with pytest.raises(ConfigError, match="delegation"):
        threads.assign("c1.d2-1", "janitor", "c1:3:1")


DELEGATING_TURN = """
import sys
from pathlib import Path
from tests.support.helpers import FAST
from tests.support.registry import registry
from tether.agent.roster import agent_of, session_for, team_of
from tether.execution.admission import execution_id_for
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths, read_claim
from tether.store.agents import AgentRecord
from tether.testing import ScriptedModel, call, calls, say
home = Path(sys.argv[1])
executor = Executor(registry, home=home, settings=FAST)
executor.runtime.agents.create(AgentRecord(name="boss", grants=("team", "t.*"), model="m-boss"))
executor.runtime.agents.create(AgentRecord(name="worker", grants=("t.*",), model="m-worker"))
models = {
    "m-boss": ScriptedModel([calls(call("agents__delegate", {"to": "worker", "request": "act"}, id="d1"))]),
    "m-worker": ScriptedModel([calls(call("t__marks_and_waits", id="w1")), say("done")]),
}
team = team_of(executor, lambda name: models[name])
session_for(team, agent_of(team, "boss")).send_sync("th", "go")
"""


def test_a_delegation_cut_by_a_crash_is_reported_with_what_the_sub_agent_did(home: Path) -> None:
    from tests.support.helpers import FAST
    from tests.support.registry import registry

    proc = subprocess.Popen([sys.executable, "-c", DELEGATING_TURN, str(home)], cwd=ROOT)
    try:
        # Its content, not the file: a kill between the file's creation and its write leaves it empty.
        wait_for(lambda: (home / "acted").exists() and (home / "acted").read_text(), what="the tool to act")
        execution_id = execution_id_for("th.d1-1", "1", "1")
        claim = wait_for(lambda: read_claim(ExecutionPaths.of(home, execution_id)), what="the claim")
        proc.send_signal(signal.SIGSTOP)  # frozen: it cannot see its worker die and record that
        os.killpg(claim.pid, signal.SIGKILL)
        wait_for(lambda: exited(claim.pid), what="the worker to die")
        proc.kill()
    finally:
        proc.kill()
        proc.wait(timeout=60)
    support = Executor(registry, home=home, settings=FAST)
    team = team_of(support, lambda name: ScriptedModel([say("checked")]))
    result = session_for(team, agent_of(team, "boss")).send_sync("th", "what happened?")
    assert result.final == "checked"
    first = support.runtime.threads.steps("th", 1)
    settled = next(s for s in first if s.kind == "tool" and s.tool == "agents.delegate")
    assert settled.result is not None and settled.result["status"] == "unknown", settled.result
    assert (
        "t.marks_and_waits" in settled.result["message"] and settled.result["data"]["thread_id"] == "th.d1-1"
    )
    assert (home / "acted").read_text() == "x"  # it acted once, and nothing ran it again
