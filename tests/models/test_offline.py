"""The offline planner's table: realistic requests for the demo toolkit → the calls it makes."""

import asyncio
import json
from typing import Any

import pytest

from tether.agent.surface import ToolSurface
from tether.models.base import OpenJob, TurnContext
from tether.models.offline import OfflineModel, numbers_in, zh_number
from tether.toolkits.demo.registry import registry

SURFACE = ToolSurface(registry, "agent")
GOLD = "拟造花萼（金）"
RED = "拟造花萼（赤）"
JOB = "1a2b3c4d5e6f7a8b9c0"
OPEN_JOB = (OpenJob(execution_id=JOB, task_id="demo.loop_farm", status="running"),)


def farm(name: str, attempts: int, kind: str = GOLD) -> tuple[str, dict[str, Any]]:
    return ("demo__farm_instance", {"instance_type": kind, "instance_name": name, "attempts": attempts})


START = ("demo__start_game", {})
EXIT = ("demo__exit_game", {})
DAILY = ("demo__daily_training", {})
STATUS = ("demo__status", {})
LOOP_GOLD = ("demo__loop_farm", {"instance_type": GOLD, "instance_name": "藏珍之蕾"})

TABLE: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = [
    ("启动游戏，然后刷 3 次金币副本", [START, farm("藏珍之蕾", 3)]),
    ("启动游戏", [START]),
    ("打开游戏再做每日实训", [START, DAILY]),
    ("刷十二次经验", [farm("回忆之蕾", 12)]),
    ("刷三次回忆之蕾，再刷两次光锥经验", [farm("回忆之蕾", 3), farm("以太之蕾", 2)]),
    ("刷 3 次金币副本", [farm("藏珍之蕾", 3)]),
    ("金币副本刷5次", [farm("藏珍之蕾", 5)]),
    ("刷一次毁灭之蕾", [farm("毁灭之蕾", 1, RED)]),
    ("刷两遍量子", [farm("空海之形", 2, "凝滞虚影")]),
    ("每日实训然后挂机", [DAILY, ("demo__loop_farm", {})]),
    ("后台一直刷金币", [LOOP_GOLD]),
    ("挂机刷钱", [LOOP_GOLD]),
    ("分解四星遗器", [("demo__salvage_relics", {"rarity": 4})]),
    ("分解 3 星遗器", [("demo__salvage_relics", {"rarity": 3})]),
    ("查看游戏状态", [STATUS]),
    ("退出游戏", [EXIT]),
    ("做完日常之后关闭游戏", [DAILY, EXIT]),
    ("start the game and then farm gold 3 times", [START, farm("藏珍之蕾", 3)]),
    ("Start the game, then farm Bud of Treasures three times", [START, farm("藏珍之蕾", 3)]),
    ("launch the game", [START]),
    ("do the dailies", [DAILY]),
    ("daily training then exit the game", [DAILY, EXIT]),
    ("farm exp 12 times", [farm("回忆之蕾", 12)]),
    ("farm the crimson calyx destruction twice", [farm("毁灭之蕾", 2, RED)]),
    ("farm light cone exp once", [farm("以太之蕾", 1)]),
    ("keep farming credits in the background", [LOOP_GOLD]),
    ("salvage 4-star relics", [("demo__salvage_relics", {"rarity": 4})]),
    ("salvage 5-star relics", [("demo__salvage_relics", {"rarity": 5})]),  # the executor will refuse 5
    ("game status", [STATUS]),
    ("close the game", [EXIT]),
    (
        "open the game, do the dailies, then farm gold 2 times and close the game",
        [START, DAILY, farm("藏珍之蕾", 2), EXIT],
    ),
]


def run_plan(
    request: str, open_jobs: tuple[OpenJob, ...] | None = None
) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """Drive the model as the session would, answering every call with a completed result."""
    model = OfflineModel()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "system prompt"},
        {"role": "user", "content": request},
    ]
    made: list[tuple[str, dict[str, Any]]] = []
    for _ in range(10):
        context = TurnContext(open_jobs=open_jobs)
        response = asyncio.run(model.complete(messages, SURFACE.tools, context=context))
        if not response.tool_calls:
            return made, response.text
        assert len(response.tool_calls) == 1  # serial: one call per decision
        call = response.tool_calls[0]
        made.append((call.name, call.arguments))
        messages.append(response.to_message())
        result = {
            "task_id": call.name,
            "execution_id": "x",
            "status": "completed",
            "message": "ok",
            "data": {},
        }
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    raise AssertionError("the planner did not finish")


@pytest.mark.parametrize(("request_text", "expected"), TABLE, ids=[r for r, _ in TABLE])
def test_planner_table(request_text: str, expected: list[tuple[str, dict[str, Any]]]) -> None:
    made, final = run_plan(request_text)
    assert made == expected
    assert final  # it always reports


def test_table_has_at_least_thirty_requests_in_both_languages() -> None:
    zh = [r for r, _ in TABLE if any("\u4e00" <= ch <= "\u9fff" for ch in r)]
    assert len(TABLE) >= 30 and len(zh) >= 12 and len(TABLE) - len(zh) >= 12


@pytest.mark.parametrize(
    ("request_text", "asks_for", "allowed"),
    [
        ("刷副本", "instance type", GOLD),
        ("刷金花", "instance name", "藏珍之蕾"),
        ("farm 3 times", "instance type", "凝滞虚影"),
        ("分解遗器", "rarity", "4"),
    ],
)
def test_ambiguous_requests_are_answered_with_the_allowed_values(
    request_text: str, asks_for: str, allowed: str
) -> None:
    made, final = run_plan(request_text)
    assert made == []
    assert asks_for in final and allowed in final


def test_it_says_plainly_what_it_cannot_do() -> None:
    made, final = run_plan("帮我订一张机票")
    assert made == [] and "做不到" in final and "demo.start_game" in final
    made, final = run_plan("book me a flight")
    assert made == [] and "can't" in final


def test_control_tools_use_the_open_job() -> None:
    assert run_plan("进度怎么样", OPEN_JOB)[0] == [("get_task_status", {"execution_id": JOB})]
    assert run_plan("stop it", OPEN_JOB)[0] == [("stop_task", {"execution_id": JOB})]
    assert run_plan("别刷了", OPEN_JOB)[0] == [("stop_task", {"execution_id": JOB})]
    made, final = run_plan("停下")
    assert made == [] and "没有正在运行的任务" in final


def test_it_stops_at_the_first_result_that_did_not_complete() -> None:
    model = OfflineModel()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "启动游戏，然后刷 3 次金币副本"}]
    first = asyncio.run(model.complete(messages, SURFACE.tools))
    messages += [
        first.to_message(),
        {
            "role": "tool",
            "tool_call_id": first.tool_calls[0].id,
            "content": json.dumps(
                {
                    "task_id": "demo.start_game",
                    "status": "failed",
                    "message": "the game exited during start-up",
                }
            ),
        },
    ]
    final = asyncio.run(model.complete(messages, SURFACE.tools))
    assert not final.tool_calls and "failed" in final.text and "没有继续" in final.text


@pytest.mark.parametrize(
    ("text", "value"), [("三", 3), ("十二", 12), ("二十五", 25), ("两", 2), ("一百", 100)]
)
def test_chinese_numbers(text: str, value: int) -> None:
    assert zh_number(text) == value


def test_numbers_in_text_ignore_words_that_only_look_like_numbers() -> None:
    assert numbers_in("一直刷") == []
    assert numbers_in("刷 3 次，再刷两次, then twice") == [3, 2, 2]
