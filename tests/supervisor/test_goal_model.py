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


def _planned(reply: Any) -> Any:
    import asyncio

    from tether.supervisor.planner import plan_goal
    from tether.testing import ScriptedModel
    from tether.toolkits.demo.registry import registry

    return asyncio.run(plan_goal("do it", registry, ScriptedModel([reply])))


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
    with pytest.raises(PlanError) as caught:
        _planned(replies[reply])
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
    plan = asyncio.run(plan_goal("a handout on solar power", registry, model, home=tmp_path))
    system = str(model.requests[0][0][0]["content"])
    assert "- lecture-handout:" in system and "Use when:" in system
    assert "# Lecture handout" not in system  # names and descriptions only, never a body
    schema = model.requests[0][1][0].parameters["properties"]["milestones"]["items"]["properties"]
    assert "lecture-handout" in schema["skill"]["enum"]
    first, second = plan.tasks
    assert "Follow the skill 'lecture-handout'" in first.description
    assert "Follow the skill" not in second.description  # a name that is not installed is not followed
