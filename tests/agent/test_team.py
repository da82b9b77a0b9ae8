"""A team of agents: grants on the surface and at the executor, delegation through one choke point,
no escalation, the person's consent asked in the thread they look at, loops and depth refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.agent.roster import agent_of, run_child, session_for
from tether.agent.team import Team, resolve
from tether.config import AgentSettings
from tether.errors import ConfigError
from tether.events import EventBus
from tether.execution.executor import Executor
from tether.models.base import Model
from tether.store.agents import AgentRecord
from tether.testing import ScriptedModel, call, calls, say
from tether.toolkits.standard import registry as standard

TEXT = (
    "Tether runs tasks in their own processes. Each task is validated. "
    "The person confirms what is destructive."
)


@pytest.fixture
def team_executor(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor(standard)


def make_team(executor: Executor, models: dict[str | None, Model], **settings: Any) -> Team:
    return Team(
        executor=executor,
        agents=executor.runtime.agents,
        model_for=lambda name: models[name],
        threads=executor.runtime.threads,
        events=EventBus(),
        settings=AgentSettings(**settings),
        known_models=lambda name: name in models,
        runner=run_child,
    )


def add_agents(executor: Executor) -> None:
    agents = executor.runtime.agents
    agents.create(
        AgentRecord(
            name="manager",
            grants=("team", "jobs", "research", "documents"),
            model="m-manager",
            persona="You run a small team.",
        )
    )
    agents.create(
        AgentRecord(
            name="research",
            grants=("research",),
            model="m-research",
            aliases=("研究助手", "researcher"),
            description="finds and sums up",
        )
    )
    agents.create(
        AgentRecord(
            name="docs",
            grants=("documents",),
            model="m-docs",
            aliases=("文档助手",),
            description="writes documents and decks",
        )
    )


def tools_of(model: ScriptedModel, request: int = 0) -> list[str]:
    return [tool.name for tool in model.requests[request][1]]


def test_an_agent_sees_and_reaches_only_its_grants(team_executor: Executor) -> None:
    add_agents(team_executor)
    research = ScriptedModel(
        [
            calls(call("workspace__delete", {"path": "notes.md"})),
            say("I cannot delete files."),
        ]
    )
    team = make_team(team_executor, {"m-research": research})
    session = session_for(team, agent_of(team, "research"))
    result = session.send_sync("r1", "delete notes.md")
    assert set(tools_of(research)) == {
        "web__read_url",
        "web__summarize_text",
        "workspace__find",
        "workspace__grep",
        "workspace__list",
        "workspace__read",
    }
    step = next(s for s in result.steps if s.kind == "tool")
    assert step.result is not None and step.result["status"] == "not_found"
    assert team_executor.runtime.threads.load("r1").agent == "research"  # type: ignore[union-attr]


def test_a_manager_delegates_and_answers_with_both(team_executor: Executor, home: Path) -> None:
    add_agents(team_executor)
    manager = ScriptedModel(
        [
            calls(call("agents__delegate", {"to": "研究助手", "request": f"Sum up: {TEXT}"})),
            calls(call("agents__delegate", {"to": "docs", "request": "Make a pptx deck titled Tether."})),
            say("Research: done. Deck: done."),
        ]
    )
    research = ScriptedModel(
        [
            calls(call("web__summarize_text", {"text": TEXT, "max_sentences": 2})),
            say("Tether isolates and validates every task."),
        ]
    )
    docs = ScriptedModel(
        [
            calls(
                call(
                    "documents__generate",
                    {"title": "Tether", "content": "## Why\n- tasks run isolated", "formats": ["pptx"]},
                )
            ),
            say("The deck is ready."),
        ]
    )
    team = make_team(team_executor, {"m-manager": manager, "m-research": research, "m-docs": docs})
    session = session_for(team, agent_of(team, "manager"))
    assert "agents__delegate" in [t.name for t in session.surface.tools]
    result = session.send_sync("boss", "research tether then make a deck")
    for model in (manager, research, docs):
        model.assert_consumed()
    assert result.status.value == "completed" and result.final == "Research: done. Deck: done."
    delegations = [s for s in result.steps if s.kind == "tool" and s.tool == "agents.delegate"]
    assert [d.result["status"] for d in delegations if d.result] == ["completed", "completed"]
    assert delegations[0].result and "isolates" in delegations[0].result["message"]
    # Each delegation is a thread of its own, linked to the step that asked, owned by its agent.
    threads = team_executor.runtime.threads
    child = threads.load("boss.d1-1")
    assert child is not None and child.agent == "research" and child.parent == "boss:1:1"
    kids = [s.tool for s in threads.steps("boss.d1-3") if s.kind == "tool"]
    assert kids == ["documents.generate"]
    # The manager holds what its team may do (a sub-agent gets its own grants ∩ its delegator's).
    assert {"agents__delegate", "get_task_status", "stop_task", "documents__generate"} <= set(
        tools_of(manager)
    )
    assert "workspace__delete" not in tools_of(manager)


def test_a_sub_agent_never_gets_more_than_its_delegator(team_executor: Executor) -> None:
    agents = team_executor.runtime.agents
    agents.create(AgentRecord(name="lead", grants=("team", "research"), model="m-lead"))
    agents.create(AgentRecord(name="handy", grants=("files", "research"), model="m-handy"))
    lead = ScriptedModel(
        [
            calls(call("agents__delegate", {"to": "handy", "request": "delete notes.md"})),
            say("handy could not."),
        ]
    )
    handy = ScriptedModel([calls(call("workspace__delete", {"path": "notes.md"})), say("not allowed")])
    team = make_team(team_executor, {"m-lead": lead, "m-handy": handy})
    session_for(team, agent_of(team, "lead")).send_sync("lead-1", "clean up")
    # handy's own grants include files, but its delegator's do not: the intersection has only research.
    assert "workspace__delete" not in tools_of(handy)
    assert set(tools_of(handy)) <= {
        "web__read_url",
        "web__summarize_text",
        "workspace__find",
        "workspace__grep",
        "workspace__list",
        "workspace__read",
    }
    steps = team_executor.runtime.threads.steps("lead-1.d1-1")
    assert [s.result["status"] for s in steps if s.kind == "tool" and s.result] == ["not_found"]


def test_a_sub_agents_destructive_call_waits_for_the_person_in_the_parent_thread(
    team_executor: Executor, home: Path
) -> None:
    agents = team_executor.runtime.agents
    agents.create(AgentRecord(name="boss", grants=("team", "files"), model="m-boss"))
    agents.create(AgentRecord(name="janitor", grants=("files",), model="m-janitor"))
    (home / "workspace").mkdir(mode=0o700, exist_ok=True)
    target = home / "workspace" / "old.txt"
    target.write_text("old")
    boss = ScriptedModel(
        [
            calls(call("agents__delegate", {"to": "janitor", "request": "delete old.txt"})),
            say("janitor deleted old.txt."),
        ]
    )
    janitor = ScriptedModel(
        [
            calls(call("workspace__delete", {"path": "old.txt"})),
            say("Deleted old.txt."),
        ]
    )
    team = make_team(team_executor, {"m-boss": boss, "m-janitor": janitor})
    session = session_for(team, agent_of(team, "boss"))
    asked = session.send_sync("b1", "tidy up")
    assert asked.status.value == "needs_confirmation"
    assert "janitor" in asked.final and "workspace.delete" in asked.final and "old.txt" in asked.final
    assert target.exists()  # nothing ran
    pending = session.pending("b1")
    assert pending is not None and pending["tool"] == "workspace.delete"
    done = session.send_sync("b1", "yes")
    assert done.status.value == "completed" and done.final == "janitor deleted old.txt."
    assert not target.exists()
    boss.assert_consumed()
    janitor.assert_consumed()

    def ran() -> list[str]:
        jobs = team_executor.jobs_for("cli")
        return [
            j.execution_id for j in jobs if j.task_id == "workspace.delete" and j.status.value == "completed"
        ]

    assert len(ran()) == 1  # ran once (the question itself is on record as a refusal)
    # A second "yes" confirms nothing: the question was used.
    boss._turns.append(say("Nothing waits for an answer."))
    session.send_sync("b1", "yes")
    assert len(ran()) == 1


def test_loops_and_depth_are_refused_with_a_clear_message(team_executor: Executor) -> None:
    agents = team_executor.runtime.agents
    agents.create(AgentRecord(name="alpha", grants=("team",), model="m-a"))
    agents.create(AgentRecord(name="beta", grants=("team",), model="m-b"))
    alpha = ScriptedModel(
        [calls(call("agents__delegate", {"to": "beta", "request": "ask alpha"})), say("no")]
    )
    beta = ScriptedModel(
        [calls(call("agents__delegate", {"to": "alpha", "request": "back to you"})), say("loop")]
    )
    team = make_team(team_executor, {"m-a": alpha, "m-b": beta})
    session_for(team, agent_of(team, "alpha")).send_sync("loop-1", "go")
    refused = [s for s in team_executor.runtime.threads.steps("loop-1.d1-1") if s.kind == "tool"]
    assert refused[0].result is not None and "alpha → beta → alpha" in refused[0].result["message"]
    # Depth: with a limit of 1, the second hop is refused with the setting's name.
    agents.create(AgentRecord(name="gamma", grants=("research",), model="m-c"))
    alpha2 = ScriptedModel([calls(call("agents__delegate", {"to": "beta", "request": "x"})), say("ok")])
    beta2 = ScriptedModel([calls(call("agents__delegate", {"to": "gamma", "request": "y"})), say("too deep")])
    team = make_team(team_executor, {"m-a": alpha2, "m-b": beta2}, delegation_max_depth=1)
    session_for(team, agent_of(team, "alpha")).send_sync("deep-1", "go")
    steps = [s for s in team_executor.runtime.threads.steps("deep-1.d1-1") if s.kind == "tool"]
    assert steps[0].result is not None and "delegation_max_depth" in steps[0].result["message"]


def test_to_resolves_in_one_order_and_says_how() -> None:
    roster = {"research": AgentRecord(name="research", aliases=("研究助手",), grants=("research",))}
    known = {"qwen2.5"}.__contains__
    assert resolve("research", roster, known).kind == "agent"
    assert resolve("研究助手", roster, known).name == "research"
    assert resolve("files", roster, known).kind == "bundle"
    assert resolve("qwen2.5", roster, known).kind == "model"
    fallback = resolve("nobody", roster, known)
    assert fallback.kind == "default" and "default model" in fallback.note and fallback.grants is None
    assert resolve("", roster, known).kind == "default"


def test_a_bundle_or_a_model_as_target(team_executor: Executor) -> None:
    team_executor.runtime.agents.create(AgentRecord(name="lead", grants=("team", "files"), model="m-lead"))
    lead = ScriptedModel(
        [
            calls(call("agents__delegate", {"to": "files", "request": "list the workspace"})),
            calls(call("agents__delegate", {"to": "nobody", "request": "say hi"})),
            say("both answered"),
        ]
    )
    helper = ScriptedModel([calls(call("workspace__list", {})), say("it is empty")])
    plain = ScriptedModel([say("hi")])  # the default model, asked with no tools
    team = make_team(team_executor, {"m-lead": lead, None: helper})
    team.model_for = lambda name: (
        {"m-lead": lead}.get(name or "", None) or (helper if helper.remaining else plain)
    )  # type: ignore[assignment]
    result = session_for(team, agent_of(team, "lead")).send_sync("l1", "go")
    assert result.final == "both answered"
    first, second = [s.result for s in result.steps if s.kind == "tool" and s.result]
    assert first["data"]["resolved_as"] == "bundle" and "workspace__list" in tools_of(helper)
    assert set(tools_of(helper)) <= {
        "workspace__" + n for n in ("list", "read", "write", "move", "delete", "find", "grep")
    }
    assert second["data"]["resolved_as"] == "default" and "default model" in second["data"]["note"]
    assert plain.requests[0][1] == []  # a plain completion has no tools


def test_a_thread_keeps_its_agent_and_unknown_agents_are_named(team_executor: Executor) -> None:
    add_agents(team_executor)
    team = make_team(team_executor, {"m-research": ScriptedModel([say("hi")])})
    session_for(team, agent_of(team, "research")).send_sync("own-1", "hello")
    assert agent_of(team, None, "own-1").name == "research"  # the thread's agent answers next time
    with pytest.raises(ConfigError, match="belongs to agent 'research'"):
        team.threads.assign("own-1", "docs")
    with pytest.raises(ConfigError, match="agents: assistant, docs, manager, research"):
        agent_of(team, "nobody")
    asyncio.run(asyncio.sleep(0))


def test_the_offline_model_hands_each_named_part_to_its_agent_in_both_languages() -> None:
    from tether.agent.team import delegate_tool
    from tether.models.offline_team import plan

    roster = {
        "research": AgentRecord(name="research", aliases=("研究助手", "researcher")),
        "docs": AgentRecord(name="docs", aliases=("文档助手", "the writer")),
    }
    tools = [delegate_tool(roster, "manager")]
    assert plan("让研究助手查一下 tether 的设计，然后让文档助手做成 PPT", tools) == [
        ("research", "查一下 tether 的设计"),
        ("docs", "做成 PPT"),
    ]
    assert plan("ask the researcher to look up durable execution, then have docs make a deck", tools) == [
        ("research", "look up durable execution"),
        ("docs", "make a deck"),
    ]
    # A request that names no agent (or not in every part) is the planner's as before.
    assert plan("查看游戏状态", tools) is None
    assert plan("让研究助手查一下 X，然后刷 3 次金币副本", tools) is None
    assert plan("让研究助手查一下 X", []) is None  # no delegation tool: no delegation


def test_an_offline_manager_delegates_to_the_agents_a_request_names(team_executor: Executor) -> None:
    from tether.models.offline import OfflineModel

    agents = team_executor.runtime.agents
    agents.create(AgentRecord(name="manager", grants=("team", "automation")))
    agents.create(AgentRecord(name="gamer", grants=("automation",), aliases=("游戏助手", "game helper")))
    team = make_team(team_executor, {None: OfflineModel()})
    session = session_for(team, agent_of(team, "manager"))
    zh = session.send_sync("off-zh", "让游戏助手查看游戏状态")
    (step,) = [s for s in zh.steps if s.kind == "tool"]
    assert step.tool == "agents.delegate" and step.args == {"to": "gamer", "request": "查看游戏状态"}
    assert step.result is not None and step.result["status"] == "completed"
    assert zh.final.startswith("gamer：")
    kids = [s.tool for s in team.threads.steps("off-zh.d1-1") if s.kind == "tool"]
    assert kids == ["demo.status"]
    en = session.send_sync("off-en", "ask the game helper to show the game status")
    (step,) = [s for s in en.steps if s.kind == "tool"]
    assert step.args == {"to": "gamer", "request": "show the game status"}
    assert en.final.startswith("gamer: ")


def test_the_built_in_assistant_stays_as_it_was_when_a_team_exists(team_executor: Executor) -> None:
    add_agents(team_executor)
    team = make_team(team_executor, {None: ScriptedModel([])})
    session = session_for(team, agent_of(team, None))
    names = {tool.name for tool in session.surface.tools}
    assert "agents__delegate" not in names and {"get_task_status", "stop_task", "workspace__delete"} <= names


def test_a_delegated_threads_question_is_answered_only_where_it_was_asked(
    team_executor: Executor, home: Path
) -> None:
    from tether.supervisor import conversations

    agents = team_executor.runtime.agents
    agents.create(AgentRecord(name="boss", grants=("team", "files"), model="m-boss"))
    agents.create(AgentRecord(name="janitor", grants=("files",), model="m-janitor"))
    boss = ScriptedModel([calls(call("agents__delegate", {"to": "janitor", "request": "delete x.txt"}))])
    janitor = ScriptedModel([calls(call("workspace__delete", {"path": "x.txt"}))])
    (home / "workspace").mkdir(mode=0o700, exist_ok=True)
    (home / "workspace" / "x.txt").write_text("x")
    team = make_team(team_executor, {"m-boss": boss, "m-janitor": janitor})
    asked = session_for(team, agent_of(team, "boss")).send_sync("q1", "tidy")
    assert asked.status.value == "needs_confirmation"
    runtime = team_executor.runtime
    listed = conversations.questions(runtime)
    assert [q["thread_id"] for q in listed] == ["q1"]  # one question, in the thread the person sees
    with pytest.raises(ConfigError, match="delegation asked by thread 'q1'"):
        conversations.submit(runtime, None, "q1.d1-1", approve=True, source="person:page")
    # A "no" in the parent settles the sub-agent's question too: nothing ran, nothing waits.
    janitor._turns.append(say("Not deleted."))
    boss._turns.append(say("The person declined."))
    declined = session_for(team, agent_of(team, "boss")).send_sync("q1", "no")
    assert declined.final == "The person declined."
    assert runtime.threads.load("q1.d1-1").pending is None  # type: ignore[union-attr]
    assert (home / "workspace" / "x.txt").exists()


def test_a_turns_events_say_which_agent_works_and_on_what_kind_of_tool(team_executor: Executor) -> None:
    add_agents(team_executor)
    research = ScriptedModel([calls(call("workspace__list", {})), say("listed")])
    team = make_team(team_executor, {"m-research": research})
    session_for(team, agent_of(team, "research")).send_sync("act-1", "list my files")
    events = team_executor.runtime.events.read(topics=["thread:act-1"])
    started = next(e for e in events if e.kind == "turn_started")
    tool = next(e for e in events if e.kind == "tool_started")
    assert started.agent == "research" and tool.activity == "files"  # type: ignore[attr-defined]


def _skill(home: Path, name: str, flow: str) -> None:
    from tether.toolkits.skills.library import HOME_SKILLS

    folder = home / HOME_SKILLS / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: a skill that runs\nwhen_to_use: when asked\n---\nRun it.\n"
    )
    (folder / "flow.yaml").write_text(flow)


def test_a_skills_flow_runs_as_the_agent_and_within_its_grants(team_executor: Executor, home: Path) -> None:
    from tether.supervisor.skillflows import start_skill_flow

    _skill(home, "check-game", "caller: cli\ntasks:\n  - id: look\n    call: {task: demo.status}\n")
    _skill(
        home, "wipe-notes", "tasks:\n  - id: wipe\n    call: {task: workspace.delete, args: {path: x.txt}}\n"
    )
    agents = team_executor.runtime.agents
    agents.create(AgentRecord(name="runner", grants=("automation", "skills.run"), model="m-run"))
    agents.create(AgentRecord(name="plain", grants=("automation",), model="m-plain"))
    runner = ScriptedModel(
        [
            calls(call("skills__run", {"skill": "check-game"})),
            calls(call("skills__run", {"skill": "wipe-notes"})),
            say("started one, the other was refused"),
        ]
    )
    plain = ScriptedModel([say("hi")])
    team = make_team(team_executor, {"m-run": runner, "m-plain": plain})
    team.start_flow = lambda *a, **k: start_skill_flow(team_executor.runtime, team_executor.registry, *a, **k)
    result = session_for(team, agent_of(team, "runner")).send_sync("sk-1", "check the game")
    first, second = [s.result for s in result.steps if s.kind == "tool" and s.result]
    assert first["status"] == "running" and first["data"]["run_id"].startswith("run-")
    run = team_executor.runtime.runs.get(first["data"]["run_id"])
    assert run is not None
    # It runs as the agent (not the `cli` the file names) and within the agent's grants.
    assert run.caller == "agent" and run.plan["grants"] == [["demo.*", "skills.run"]]
    assert second["status"] == "rejected" and "workspace.delete" in second["message"]  # outside the grants
    # An agent without the grant does not see the tool at all.
    session_for(team, agent_of(team, "plain")).send_sync("sk-2", "hello")
    assert "skills__run" not in tools_of(plain)


def test_review_findings_stay_fixed(team_executor: Executor, home: Path) -> None:
    """An independent review found these: empty grants failed open, a wildcard granted delegation and
    skills.run, and a question from a sub-agent that is the built-in assistant could not be answered."""
    from tether.tasks.grants import Grants

    assert not Grants(()).allows("workspace.read") and Grants.from_json([]) is not None
    assert not Grants.of(["*"]).allows("agents.delegate") and not Grants.of(["skills.*"]).allows("skills.run")
    assert Grants.of(["team"]).allows("agents.delegate")
    agents = team_executor.runtime.agents
    agents.create(AgentRecord(name="boss", grants=("team", "files"), model="m-boss"))
    (home / "workspace").mkdir(mode=0o700, exist_ok=True)
    (home / "workspace" / "y.txt").write_text("y")
    boss = ScriptedModel(
        [
            calls(call("agents__delegate", {"to": "assistant", "request": "delete y.txt"})),
            say("deleted"),
        ]
    )
    helper = ScriptedModel([calls(call("workspace__delete", {"path": "y.txt"})), say("done")])
    team = make_team(team_executor, {"m-boss": boss, None: helper})
    session = session_for(team, agent_of(team, "boss"))
    assert session.send_sync("fix-1", "tidy").status.value == "needs_confirmation"
    done = session.send_sync("fix-1", "yes")
    assert done.final == "deleted" and not (home / "workspace" / "y.txt").exists()
