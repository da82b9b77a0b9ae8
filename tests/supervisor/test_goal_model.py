"""`tether goal` with a real model client: a recorded session (the planner's milestones, then each
milestone's agent turn) is served by a real HTTP server on 127.0.0.1 and replays a whole goal, the
same way every time."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAI, completion
from tests.support.helpers import tether_cli

SESSION = Path(__file__).parent / "sessions" / "goal_gold.json"
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _no_game_left(tmp_path: Path) -> Iterator[None]:
    """The goal starts the demo game and does not quit it: stop every game a test's homes started."""
    yield
    from tether.toolkits.demo.game import info_path

    for info in tmp_path.glob("*"):
        path = info_path(info)
        if path.exists():
            with contextlib.suppress(ValueError, KeyError, OSError):
                os.kill(int(json.loads(path.read_text())["pid"]), signal.SIGKILL)


def replay(home: Path, server: FakeOpenAI) -> dict[str, Any]:
    session = json.loads(SESSION.read_text(encoding="utf-8"))
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "vllm"\nmodel = "qwen2.5"\nbase_url = "{server.url}"\n', encoding="utf-8"
    )
    for reply in session["replies"]:
        calls = [tuple(c) for c in reply.get("tool_calls", [])]
        server.reply(completion(reply.get("content"), tool_calls=calls or None))  # type: ignore[arg-type]
    code, out, err = tether_cli(
        "goal", session["goal"], "--json", home=home, TETHER_CLI_SERVER="0", TETHER_MODEL_STREAM="0"
    )
    assert code == 0, (out, err)
    return json.loads(out)


def shape(run: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(t["id"], t["status"], t["attempts"], t["message"]) for t in run["tasks"]]


def test_a_recorded_model_session_replays_a_whole_goal_deterministically(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = []
    for n in range(2):
        home = tmp_path / f"home{n}"
        home.mkdir()
        monkeypatch.setenv("TETHER_DEMO_STEP_S", "0.02")
        runs.append(replay(home, fake_openai))
        assert not fake_openai.script, "the session was not replayed to its end"
    first, second = runs
    assert first["status"] == "completed", first
    assert shape(first) == shape(second)
    assert [t["id"] for t in first["tasks"]] == ["start", "farm", "status"]
    # What the goal cost is every model call it made, the planner's too (each reply reports 11 in / 7 out).
    replies = len(json.loads(SESSION.read_text(encoding="utf-8"))["replies"])
    spent = first["usage"]
    assert (spent["model_calls"], spent["input_tokens"], spent["output_tokens"]) == (
        replies, 11 * replies, 7 * replies,
    )  # fmt: skip
    assert first["planning_usage"]["model_calls"] == 1 and first["planning_usage"]["input_tokens"] == 11
    code, shown, _ = tether_cli("flow", "show", first["run_id"], home=tmp_path / "home0", COLUMNS="160")
    assert code == 0 and "planning · 1 model call · 11 in / 7 out tokens" in shown, shown
    assert first["tasks"][1]["message"] == "刷了 2 次藏珍之蕾。"
    # The planner saw the goal and the tools, and was asked to submit through one tool.
    planner = fake_openai.requests[0]
    assert planner["tools"][0]["function"]["name"] == "submit_plan"
    assert "刷 2 次金币副本" in planner["messages"][-1]["content"]
    # Each milestone's agent was restricted to the business tools and acted through the executor.
    _, out, _ = tether_cli("job", "list", "--json", home=tmp_path / "home0")
    assert sorted(job["task_id"] for job in json.loads(out)) == [
        "demo.farm_instance",
        "demo.start_game",
        "demo.status",
    ]


def _planned(*replies: Any) -> Any:
    import asyncio

    from tether.supervisor.planner import plan_goal
    from tether.testing import ScriptedModel
    from tether.toolkits.demo.registry import registry

    plan, _ = asyncio.run(plan_goal("do it", registry, ScriptedModel(list(replies))))
    return plan


def _milestones(*items: dict[str, Any]) -> Any:
    from tether.testing import call, calls

    return calls(call("submit_plan", {"milestones": list(items)}))


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("nothing", "the planner gave no plan: nothing"),
        ("beyond", "no tool can book flights"),
        ("eleven", "1–10 milestones, got 11"),
        ("cycle", "cycle"),
        ("unknown dependency", "depends on 'zz', which is not a task"),
    ],
)
def test_a_model_plan_that_cannot_run_is_refused_with_the_reason(reply: str, problem: str) -> None:
    from tether.errors import PlanError
    from tether.testing import call, calls, say

    replies = {
        "nothing": say("nothing"),
        "beyond": calls(call("submit_plan", {"milestones": [], "beyond": "no tool can book flights"})),
        "eleven": _milestones(*({"id": f"m{i}", "description": "x"} for i in range(11))),
        "cycle": _milestones(
            {"id": "a", "description": "x", "depends_on": ["b"]},
            {"id": "b", "description": "y", "depends_on": ["a"]},
        ),
        "unknown dependency": _milestones({"id": "a", "description": "x", "depends_on": ["zz"]}),
    }
    with pytest.raises(PlanError) as caught:  # asked once to repair it, it gives the same answer
        _planned(*([replies[reply]] if reply == "beyond" else [replies[reply]] * 2))
    assert problem in (caught.value.message + json.dumps(caught.value.data, ensure_ascii=False))


def test_a_plan_written_as_text_by_a_small_model_is_read() -> None:
    from tether.testing import say

    text = 'Here is the plan: {"milestones": [{"id": "m1", "description": "启动游戏"}]}'
    plan = _planned(say(text))
    assert [(t.id, t.executor, t.description) for t in plan.tasks] == [("m1", "agent", "启动游戏")]


def test_the_planner_is_offered_the_home_skills_and_a_milestone_may_follow_one(tmp_path: Path) -> None:
    import asyncio

    from tether.supervisor.planner import plan_goal
    from tether.testing import ScriptedModel
    from tether.toolkits.standard import registry

    model = ScriptedModel(
        [_milestones({"id": "m1", "description": "Write the handout", "skill": "lecture-handout"},
                     {"id": "m2", "description": "Tidy up", "skill": "no-such-skill", "depends_on": ["m1"]})]
    )  # fmt: skip
    plan, _ = asyncio.run(plan_goal("a handout on solar power", registry, model, home=tmp_path))
    system = str(model.requests[0][0][0]["content"])
    assert "- lecture-handout:" in system and "Use when:" in system
    assert "# Lecture handout" not in system  # names and descriptions only, never a body
    schema = model.requests[0][1][0].parameters["properties"]["milestones"]["items"]["properties"]
    assert "lecture-handout" in schema["skill"]["enum"]
    first, second = plan.tasks
    assert "Follow the skill 'lecture-handout'" in first.description
    assert "Follow the skill" not in second.description  # a name that is not installed is not followed


# -- a milestone is done only when its work was done ----------------------------------------------


def _small_model(milestones: list[dict[str, Any]], act: dict[str, Any]) -> Any:
    """A model as a real small one behaves: it plans well, then for each milestone either calls a tool
    (``act[description]`` is a tool call) or only says it did the work (a string), and after a tool's
    result claims success whatever the result said."""

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        names = [t["function"]["name"] for t in request.get("tools") or []]
        if "submit_plan" in names:
            return completion(
                None, tool_calls=[("p1", "submit_plan", json.dumps({"milestones": milestones}))]
            )
        if messages[-1]["role"] == "tool":
            return completion("好的，已经完成了。")
        asked = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        for description, action in act.items():
            if description in asked:
                if isinstance(action, str):
                    return completion(action)
                name, args = action
                return completion(None, tool_calls=[("c1", name, json.dumps(args, ensure_ascii=False))])
        return completion("我不确定要做什么。")

    return respond


def _goal(home: Path, server: FakeOpenAI, goal: str) -> tuple[int, dict[str, Any]]:
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "vllm"\nmodel = "qwen2.5"\nbase_url = "{server.url}"\n', encoding="utf-8"
    )
    code, out, err = tether_cli(
        "goal", goal, "--json", home=home, TETHER_CLI_SERVER="0", TETHER_MODEL_STREAM="0", timeout=150
    )
    assert out.strip(), err
    return code, json.loads(out)


def test_a_milestone_whose_call_was_refused_is_never_shown_done(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured with Qwen2.5-Coder-1.5B: the farm call used the alias 金币 and was rejected, the model
    said it had farmed, and `flow show` printed ✓ farm_instance completed with 0 farms in the game."""
    from tether.toolkits.demo import game

    monkeypatch.setenv("TETHER_DEMO_STEP_S", "0.02")
    home = tmp_path / "home"
    home.mkdir()
    fake_openai.responder = _small_model(
        [{"id": "start", "description": "启动游戏"},
         {"id": "farm", "description": "刷 2 次金币副本", "depends_on": ["start"]}],
        {"启动游戏": ("demo__start_game", {}),
         "刷 2 次金币副本": ("demo__farm_instance",
                           {"instance_type": "拟造花萼（金）", "instance_name": "金币", "attempts": 2})},
    )  # fmt: skip
    code, run = _goal(home, fake_openai, "启动游戏，然后刷 2 次金币副本")
    tasks = {t["id"]: t for t in run["tasks"]}
    assert tasks["start"]["status"] == "completed"
    assert tasks["farm"]["status"] != "completed", run
    assert code != 0 and run["status"] in ("waiting_for_human", "failed"), run
    assert tasks["farm"]["attempts"] >= 2  # the failure chain ran: retried before a person is asked
    assert "金币" in json.dumps(tasks["farm"], ensure_ascii=False)  # the refusal is the diagnostics
    assert game.load_state(home)["farm_attempts_total"] == 0


def test_a_milestone_where_no_tool_ran_is_not_done(
    tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured: the model wrote the start call as text, nothing ran, and ✓ start_game completed."""
    from tether.toolkits.demo import game

    monkeypatch.setenv("TETHER_DEMO_STEP_S", "0.02")
    home = tmp_path / "home"
    home.mkdir()
    fake_openai.responder = _small_model(
        [{"id": "start", "description": "启动游戏"}], {"启动游戏": "游戏已经启动了。"}
    )
    code, run = _goal(home, fake_openai, "启动游戏")
    start = run["tasks"][0]
    assert start["status"] != "completed" and code != 0, run
    assert "no tool" in json.dumps(start, ensure_ascii=False)
    assert not game.info_path(home).exists()  # the game was never started


def test_a_bad_plan_says_what_is_wrong_and_the_model_repairs_it_once() -> None:
    """A real small model's plan once read "1 validation error for Task"."""
    import asyncio

    from tether.supervisor.planner import plan_goal
    from tether.testing import ScriptedModel
    from tether.toolkits.demo.registry import registry

    bad = _milestones({"id": "Start Game!", "description": "启动游戏"})
    good = _milestones({"id": "start", "description": "启动游戏"})
    model = ScriptedModel([bad, good])
    plan, _ = asyncio.run(plan_goal("启动游戏", registry, model))
    assert [t.id for t in plan.tasks] == ["start"]
    repair = str(model.requests[1][0][-1]["content"])
    assert "'Start Game!'" in repair and "letter" in repair and "validation error" not in repair
    model.assert_consumed()


def test_a_plan_bad_twice_falls_back_to_the_offline_plan_when_that_is_usable_and_says_so() -> None:
    import asyncio

    from tether.errors import PlanError
    from tether.supervisor.planner import plan_goal
    from tether.testing import ScriptedModel, say
    from tether.toolkits.demo.registry import registry

    bad = _milestones({"id": "m1", "description": "x", "depends_on": ["m9"]})
    plan, note = asyncio.run(plan_goal("启动游戏，然后刷 2 次金币副本", registry, ScriptedModel([bad, bad])))
    assert [t.call.task for t in plan.tasks if t.call] == ["demo.start_game", "demo.farm_instance"]
    assert "offline" in note and "m9" in note
    # When the offline planner cannot plan it either, the model's problem is what the person reads.
    with pytest.raises(PlanError, match="even after one repair request: the planner gave no plan: sorry"):
        asyncio.run(plan_goal("book me a flight", registry, ScriptedModel([bad, say("sorry")])))


def test_a_goal_whose_plan_could_not_be_made_says_why_not_failed_empty(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """With a real small model the goal ended in 'failed ()'."""
    home = tmp_path / "home"
    home.mkdir()
    fake_openai.responder = lambda request: completion("I cannot plan that.")
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "vllm"\nmodel = "qwen2.5"\nbase_url = "{fake_openai.url}"\n', encoding="utf-8"
    )
    code, out, err = tether_cli(
        "goal", "book me a flight", home=home, TETHER_CLI_SERVER="0", TETHER_MODEL_STREAM="0", timeout=120
    )
    assert code == 1
    assert "failed ()" not in out + err and "I cannot plan that" in out + err, (out, err)
    # Planning that came to nothing still cost its model calls (asked, then asked to repair): on record.
    code, out, err = tether_cli("flow", "list", "--json", home=home)
    run_id = json.loads(out)[0]["run_id"]
    code, out, err = tether_cli("flow", "show", run_id, "--json", home=home)
    assert json.loads(out)["planning_usage"]["model_calls"] == 2, out
    # A run's id given to `tether trace` (audit) points to the command that shows it.
    code, out, err = tether_cli("trace", run_id, home=home)
    assert code == 2 and f"tether flow show {run_id}" in out + err, (out, err)
