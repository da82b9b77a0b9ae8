"""Plans are checked before anything runs: every problem named, flow files with their places, goals
planned offline in both languages, and the schema that ships is the one the code checks."""

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.helpers import tether_cli
from tests.support.robot import robot
from tether.errors import PlanError
from tether.supervisor import flowfile
from tether.supervisor.goals import plan_offline
from tether.supervisor.plan import Plan, schema
from tether.supervisor.validate import check, cycle, problems
from tether.toolkits.demo.registry import registry

GOLD = {"instance_type": "拟造花萼（金）", "instance_name": "藏珍之蕾", "attempts": 3}


def plan(*tasks: dict, **extra: object) -> Plan:
    return Plan.model_validate({"goal": "g", "tasks": list(tasks), **extra})


def said(found: list) -> list[str]:
    return [str(p) for p in found]


def test_a_good_plan_has_no_problems() -> None:
    good = plan(
        {"id": "start", "call": {"task": "demo.start_game"}},
        {"id": "farm", "depends_on": ["start"], "call": {"task": "demo.farm_instance", "args": GOLD}},
        {"id": "close", "depends_on": ["farm"], "call": {"task": "demo.exit_game"}, "review": "before"},
    )
    assert problems(good, registry) == [] and check(good, registry) is good


def test_every_problem_is_named_at_once() -> None:
    bad = plan(
        {"id": "a", "call": {"task": "demo.start_gam"}},  # a typo
        {
            "id": "b",
            "depends_on": ["a", "ghost"],
            "call": {"task": "demo.farm_instance", "args": {"attempts": 0}},
        },
        {"id": "c", "depends_on": ["b"], "call": {"task": "demo.salvage_relics", "args": {"rarity": 4}}},
        {
            "id": "d",
            "depends_on": ["c"],
            "executor": "coder",
            "description": "write it",
            "inputs": ["design.api"],
        },
        {"id": "e", "call": {"task": "demo.debug_hang"}},  # CLI only: not for a plan run as agent
        {"id": "f", "when": {"task": "d"}, "call": {"task": "demo.status"}},
    )
    found = " | ".join(said(problems(bad, registry)))
    assert "'demo.start_gam'" in found and "did you mean demo.start_game" in found
    assert "'ghost', which is not a task" in found
    assert (
        "task 'b': calls demo.farm_instance with arguments it refuses" in found and "instance_type" in found
    )
    assert "destructive" in found and "review: before" in found
    assert "executor 'coder' is not a profile" in found
    assert "needs 'design.api'" in found
    assert "'demo.debug_hang', which is not a task available to agent" in found
    assert "when names 'd', which does not run before it" in found
    with pytest.raises(PlanError) as caught:
        check(bad, registry)
    assert len(caught.value.data["problems"]) >= 8


def test_cycles_are_named_as_a_path() -> None:
    looped = plan(
        {"id": "a", "depends_on": ["c"], "call": {"task": "demo.status"}},
        {"id": "b", "depends_on": ["a"], "call": {"task": "demo.status"}},
        {"id": "c", "depends_on": ["b"], "call": {"task": "demo.status"}},
    )
    path = cycle(looped)
    assert path is not None and path[0] == path[-1] and set(path) == {"a", "b", "c"}
    assert any("cycle" in p for p in said(problems(looped, registry)))


def test_inputs_come_from_upstream_or_the_context() -> None:
    ok = plan(
        {"id": "a", "executor": "agent", "description": "design the api", "outputs": ["design.api"]},
        {
            "id": "b",
            "depends_on": ["a"],
            "executor": "agent",
            "description": "code it",
            "inputs": ["design.api", "inputs.spec"],
        },
        context={"spec": "a login api"},
    )
    assert problems(ok, registry) == []
    sideways = plan(
        {"id": "a", "executor": "agent", "description": "design", "outputs": ["design.api"]},
        {
            "id": "b",
            "executor": "agent",
            "description": "code",
            "inputs": ["design.api"],
        },  # not downstream of a
    )
    assert any("needs 'design.api'" in p for p in said(problems(sideways, registry)))


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ({"id": "x"}, "exactly one of `call`"),
        ({"id": "x", "executor": "agent"}, "needs a description"),
        (
            {"id": "x", "call": {"task": "demo.status"}, "executor": "agent", "description": "d"},
            "exactly one",
        ),
        ({"id": "1x", "call": {"task": "demo.status"}}, "pattern"),
        ({"id": "x", "call": {"task": "demo.status"}, "loop": {"until": {"task": "x"}}}, "max_iterations"),
        ({"id": "x", "call": {"task": "demo.status"}, "inputs": ["nowhere.key"]}, "pattern"),
    ],
)
def test_malformed_tasks_are_refused_by_the_model(task: dict, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        flowfile.parse(yaml.safe_dump({"tasks": [task]}))


def test_flow_files_say_where_they_are_wrong(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"not valid YAML at line \d+, column \d+"):
        flowfile.parse("tasks:\n  - id: a\n    call: {task: [\n")
    with pytest.raises(PlanError, match=r"tasks\[1\] \(farm\)\.call\.task"):
        flowfile.parse(
            "tasks:\n  - id: a\n    call: {task: demo.status}\n  - id: farm\n    call: {args: {}}\n"
        )
    with pytest.raises(PlanError, match="a mapping with `tasks:`"):
        flowfile.parse("- just\n- a list\n")
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(PlanError, match="cannot be read"):
        flowfile.load(path, registry)


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_any_text_is_a_plan_or_a_plan_error(text: str) -> None:
    try:
        flowfile.parse(text)
    except PlanError:
        pass


def test_the_shipped_schema_is_the_one_the_code_checks() -> None:
    shipped = json.loads(flowfile.SCHEMA_FILE.read_text(encoding="utf-8"))
    assert shipped == json.loads(json.dumps(schema()))
    assert {"tasks", "goal"} <= set(shipped["properties"])


@pytest.mark.parametrize(
    ("goal", "calls"),
    [
        (
            "启动游戏，刷 3 次金币副本，再做每日实训，最后退出游戏",
            ["demo.start_game", "demo.farm_instance", "demo.daily_training", "demo.exit_game"],
        ),
        (
            "start the game, farm exp twice, then salvage 3-star relics",
            ["demo.start_game", "demo.farm_instance", "demo.salvage_relics"],
        ),
        ("啟動遊戲後刷兩次經驗", ["demo.start_game", "demo.farm_instance"]),
    ],
)
def test_a_goal_becomes_a_chain_of_checked_calls(goal: str, calls: list[str]) -> None:
    made = plan_offline(goal, registry)
    assert [t.call.task for t in made.tasks if t.call] == calls
    assert all(t.depends_on == [made.tasks[i - 1].id] for i, t in enumerate(made.tasks) if i)
    for task in made.tasks:  # whatever needs a person's consent waits for it
        assert task.call is not None
        spec = registry.get(task.call.task)
        assert spec is not None and (task.review == "before") == (spec.danger.value != "safe")
    assert problems(made, registry) == []


def test_a_goal_on_another_toolkit() -> None:
    made = plan_offline("打扫厨房然后回去充电", robot)
    assert [(t.call.task, t.call.args) for t in made.tasks if t.call] == [
        ("robot.clean", {"room": "kitchen"}),
        ("robot.dock", {}),
    ]


@pytest.mark.parametrize("goal", ["订机票", "farm gold and book a flight", "刷副本", "strat the game"])
def test_a_goal_beyond_the_tools_or_unclear_is_said_plainly(goal: str) -> None:
    with pytest.raises(PlanError) as caught:
        plan_offline(goal, registry)
    assert any(
        word in caught.value.message for word in ("做不到", "can't", "选哪一个", "Which", "Did you mean")
    )


def test_flow_commands(tmp_path: Path) -> None:
    home, path = tmp_path / "home", tmp_path / "plan.yaml"

    def tether(*args: str) -> tuple[int, str, str]:
        return tether_cli("--home", str(home), *args, home=home)

    code, _, err = tether("flow", "plan", "启动游戏，然后刷 3 次金币副本", "-o", str(path))
    assert code == 0, err
    code, out, _ = tether("flow", "validate", str(path), "--json")
    assert code == 0 and json.loads(out) == {"valid": True, "tasks": 2}
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["tasks"][1]["call"]["args"]["attempts"] = 500
    document["tasks"][0]["depends_on"] = [document["tasks"][1]["id"]]
    path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    code, out, _ = tether("flow", "validate", str(path), "--json")
    result = json.loads(out)
    assert code == 2 and result["valid"] is False
    assert any("cycle" in p["problem"] for p in result["problems"])
    assert any("attempts" in p["problem"] for p in result["problems"])
    code, out, err = tether("flow", "validate", str(path))
    assert code == 2 and "cycle" in out and "Traceback" not in err
