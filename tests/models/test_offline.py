"""The offline planner's table: realistic requests for the demo toolkit → the calls it makes."""

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def loop(name: str | None = None, kind: str = GOLD, **extra: Any) -> tuple[str, dict[str, Any]]:
    return ("demo__loop_farm", ({"instance_type": kind, "instance_name": name} if name else {}) | extra)


def salvage(rarity: int) -> tuple[str, dict[str, Any]]:
    return ("demo__salvage_relics", {"rarity": rarity})


def farm_once(name: str, kind: str = GOLD) -> tuple[str, dict[str, Any]]:
    """A farm call that leaves attempts to its default (one run)."""
    return ("demo__farm_instance", {"instance_type": kind, "instance_name": name})


def job_status(eid: str = "job-1") -> tuple[str, dict[str, Any]]:
    return ("get_task_status", {"execution_id": eid})


Calls = list[tuple[str, dict[str, Any]]]

# request → the calls it makes, in order ([] = it must run nothing and say why or ask).
TABLE: list[tuple[str, Calls]] = [
    # -- the tour's requests -----------------------------------------------------------------
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
    ("分解四星遗器", [salvage(4)]),
    ("分解 3 星遗器", [salvage(3)]),
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
    ("salvage 4-star relics", [salvage(4)]),
    ("salvage 5-star relics", []),  # asked first: 5 is not one of 2, 3, 4 (the executor would refuse it)
    ("game status", [STATUS]),
    ("close the game", [EXIT]),
    (
        "open the game, do the dailies, then farm gold 2 times and close the game",
        [START, DAILY, farm("藏珍之蕾", 2), EXIT],
    ),
    # -- counts in words, digits and mixed forms; 一下 and 一点 are not one ---------------------
    ("farm gold twice", [farm("藏珍之蕾", 2)]),
    ("farm gold x3", [farm("藏珍之蕾", 3)]),
    ("farm exp 3x", [farm("回忆之蕾", 3)]),
    ("farm gold ×4", [farm("藏珍之蕾", 4)]),
    ("farm light cone exp three times", [farm("以太之蕾", 3)]),
    ("grind exp 20 times", [farm("回忆之蕾", 20)]),
    ("farm credits thrice", [farm("藏珍之蕾", 3)]),
    ("run the gold calyx for credits 4 times", [farm("藏珍之蕾", 4)]),
    ("farm gold a dozen times", [farm("藏珍之蕾", 12)]),
    ("刷一下金币，刷三次", [farm("藏珍之蕾", 3)]),
    ("刷一下金币", [farm_once("藏珍之蕾")]),
    ("刷一点经验", [farm_once("回忆之蕾")]),
    ("刷两遍经验", [farm("回忆之蕾", 2)]),
    ("金币刷五遍", [farm("藏珍之蕾", 5)]),
    ("刷金币三次", [farm("藏珍之蕾", 3)]),
    ("刷20次金币", [farm("藏珍之蕾", 20)]),
    ("刷十次光锥", [farm("以太之蕾", 10)]),
    ("经验书刷二十五次", [farm("回忆之蕾", 25)]),
    ("刷俩次金币", [farm("藏珍之蕾", 2)]),
    ("刷 3 遍 gold", [farm("藏珍之蕾", 3)]),
    # -- how people build sentences: 把, 给我, 帮我…吧, please, can you -------------------------
    ("帮我把游戏打开吧", [START]),
    ("给我刷三次金币", [farm("藏珍之蕾", 3)]),
    ("帮我刷一下经验吧", [farm_once("回忆之蕾")]),
    ("把游戏关了", [EXIT]),
    ("把四星遗器分解了", [salvage(4)]),
    ("麻烦帮我做一下每日实训", [DAILY]),
    ("请启动游戏", [START]),
    ("能帮我开游戏吗", [START]),
    ("可以帮我刷两次经验吗？", [farm("回忆之蕾", 2)]),
    ("please start the game", [START]),
    ("can you farm gold twice for me?", [farm("藏珍之蕾", 2)]),
    ("could you please close the game", [EXIT]),
    ("I want to do the daily training", [DAILY]),
    ("let's farm exp 5 times", [farm("回忆之蕾", 5)]),
    ("go farm some gold", [farm_once("藏珍之蕾")]),
    # -- Traditional characters -------------------------------------------------------------
    ("啟動遊戲", [START]),
    ("開始遊戲", [START]),
    ("關閉遊戲", [EXIT]),
    ("刷三次金幣", [farm("藏珍之蕾", 3)]),
    ("每日實訓", [DAILY]),
    ("分解四星遺器", [salvage(4)]),
    ("掛機刷錢", [LOOP_GOLD]),
    ("遊戲狀態", [STATUS]),
    ("開遊戲後刷兩次經驗", [START, farm("回忆之蕾", 2)]),
    # -- in the background ------------------------------------------------------------------
    ("keep grinding gold in the background", [LOOP_GOLD]),
    ("afk farm exp", [loop("回忆之蕾")]),
    ("后台一直刷经验", [loop("回忆之蕾")]),
    ("挂机", [loop()]),
    ("loop farm light cone exp for 50 rounds", [loop("以太之蕾", rounds=50)]),
    ("farm gold nonstop", [LOOP_GOLD]),
    ("一直刷光锥", [loop("以太之蕾")]),
    # -- compound requests keep every part, in order ------------------------------------------
    ("启动游戏后刷三次经验书", [START, farm("回忆之蕾", 3)]),
    ("刷三次金币之后把游戏关了", [farm("藏珍之蕾", 3), EXIT]),
    ("loop farm exp and tell me how it's going", [loop("回忆之蕾"), job_status()]),
    ("挂机刷经验，然后告诉我进度", [loop("回忆之蕾"), job_status()]),
    ("close the game after farming gold twice", [farm("藏珍之蕾", 2), EXIT]),
    ("关游戏之前先刷两次金币", [farm("藏珍之蕾", 2), EXIT]),
    (
        "start the game, farm exp 2 times, then salvage 3-star relics",
        [START, farm("回忆之蕾", 2), salvage(3)],
    ),
    ("do the dailies and then keep farming gold", [DAILY, LOOP_GOLD]),
    ("farm gold twice and exp twice", [farm("藏珍之蕾", 2), farm("回忆之蕾", 2)]),
    ("打开游戏，刷金币，然后退出", [START, farm_once("藏珍之蕾"), EXIT]),
    ("start the game then status", [START, STATUS]),
    # -- several values of one parameter: one call each --------------------------------------
    ("分解三星和四星遗器", [salvage(3), salvage(4)]),
    ("三星和四星都分解了", [salvage(3), salvage(4)]),
    ("salvage 2 and 3 star relics", [salvage(2), salvage(3)]),
    ("刷金币和经验", [farm_once("藏珍之蕾"), farm_once("回忆之蕾")]),
    # -- questions about state ----------------------------------------------------------------
    ("is the game running?", [STATUS]),
    ("游戏开着没", [STATUS]),
    ("游戏开着吗？", [STATUS]),
    ("how is it going", [STATUS]),
    ("what's the status", [STATUS]),
    ("how many times have I farmed?", [STATUS]),
    ("遊戲開著沒", [STATUS]),
    ("游戏现在什么情况", [STATUS]),
    # -- not sure of every part: nothing runs ------------------------------------------------
    ("don't start the game", []),
    ("不要启动游戏", []),
    ("farm gold 3 times and book a flight", []),
    ("启动游戏然后订机票", []),
    ("delete all relics", []),
    ("start the game maybe", []),
    ("刷金币副本 3 次 5 次", []),
    ("farm the attic", []),
    ("帮我订一张机票", []),
    ("sell the game", []),
    # -- typos close to a known word: did you mean …? ----------------------------------------
    ("strat the game", []),
    ("farm gld 3 times", []),
    ("启懂游戏", []),
    ("salvge 4-star relics", []),
    # -- more of how people talk ----------------------------------------------------------------
    ("开一下游戏", [START]),
    ("帮我开下游戏", [START]),
    ("刷五把金币", [farm("藏珍之蕾", 5)]),
    ("打两次光锥副本", [farm("以太之蕾", 2)]),
    ("farm credits 10 times then quit the game", [farm("藏珍之蕾", 10), EXIT]),
    ("日常做一下然后挂机刷经验", [DAILY, loop("回忆之蕾")]),
    ("先启动游戏，再刷两次毁灭", [START, farm("毁灭之蕾", 2, RED)]),
    ("farm the quantum shadow twice", [farm("空海之形", 2, "凝滞虚影")]),
    ("分解掉所有三星遗器", [salvage(3)]),
    ("关掉游戏", [EXIT]),
    ("刷三次金币，然后刷三次经验，最后关游戏", [farm("藏珍之蕾", 3), farm("回忆之蕾", 3), EXIT]),
    ("开游戏 刷金币", [START, farm_once("藏珍之蕾")]),
    ("請幫我刷兩次經驗書", [farm("回忆之蕾", 2)]),
    ("一直挂机刷钱直到我说停", [LOOP_GOLD]),
    ("farm gold for 2 hours", []),
    ("刷三次", []),
    ("fire up the game", []),
    ("帮我打开游戏然后刷四次金币", [START, farm("藏珍之蕾", 4)]),
    ("我想刷两次经验", [farm("回忆之蕾", 2)]),
    ("先做日常，再挂机刷钱", [DAILY, LOOP_GOLD]),
    ("farm bud of memories 6 times", [farm("回忆之蕾", 6)]),
    ("farm exp 2x then exit", [farm("回忆之蕾", 2), EXIT]),
    ("could you do my dailies please", [DAILY]),
    ("salvage three star relics", [salvage(3)]),
    ("分解2星遗器", [salvage(2)]),
    ("刷光锥经验三次然后分解四星遗器", [farm("以太之蕾", 3), salvage(4)]),
    ("刷五次红花毁灭", [farm("毁灭之蕾", 5, RED)]),
    ("farm the fire shadow 2 times", [farm("炎华之形", 2, "凝滞虚影")]),
    ("游戏还开着吗", [STATUS]),
    ("随便刷点什么", []),
    ("start the game and don't close it", []),
    ("开游戏，不要做日常", []),
    ("shut down the game", []),
    ("进游戏刷两把经验书", [START, farm("回忆之蕾", 2)]),
    ("每日任务做完了就退出游戏", [DAILY, EXIT]),
    ("金币本来三次", [farm("藏珍之蕾", 3)]),
    ("挂机刷光锥经验", [loop("以太之蕾")]),
    ("帮我关一下游戏", [EXIT]),
    ("分解五星遗器", []),
    ("游戏开了没", [STATUS]),
    ("please launch the game and farm credits 5 times", [START, farm("藏珍之蕾", 5)]),
    ("grind the golden calyx for exp 3 times", [farm("回忆之蕾", 3)]),
    ("farm erudition 4 times", [farm("智识之蕾", 4, RED)]),
    ("keep farming exp until I say stop", [loop("回忆之蕾")]),
    ("salvage 4 star relics and 3 star relics", [salvage(4), salvage(3)]),
    ("farm", []),
    ("uninstall the game", []),
    ("start teh game", []),
    ("刷金币 然后 卸载游戏", []),
    # -- asking about an action, or a count that cannot be one: nothing runs ---------------------
    ("can I salvage 5-star relics?", []),
    ("what happens if I salvage 4-star relics?", []),
    ("我可以分解四星遗器吗", []),
    ("分解四星遗器两次", []),  # 两次 says how often; a rarity is not a count
    ("salvage 4-star relics twice", []),
    ("farm gold -3 times", [farm("藏珍之蕾", -3)]),  # said as negative: the executor refuses it, naming 1–99
    ("刷负三次金币", [farm("藏珍之蕾", -3)]),
    ("开游戏关游戏开游戏", [START, EXIT, START]),
    # -- ambiguous: which one? ----------------------------------------------------------------
    ("刷副本", []),
    ("farm 3 times", []),
    ("分解遗器", []),
    ("刷金花", []),
]

ROBOT_TABLE: list[tuple[str, Calls]] = [
    ("打扫厨房", [("robot__clean", {"room": "kitchen"})]),
    ("vacuum the garage twice", [("robot__clean", {"room": "garage", "passes": 2})]),
    ("clean the kitchen", [("robot__clean", {"room": "kitchen"})]),
    ("打扫两遍车库", [("robot__clean", {"room": "garage", "passes": 2})]),
    ("打扫厨房然后回去充电", [("robot__clean", {"room": "kitchen"}), ("robot__dock", {})]),
    ("is the robot docked?", [("robot__status", {})]),
    ("机器人现在什么状态", [("robot__status", {})]),
    ("打扫一下", []),
    ("vacuum the attic", []),
    ("清空地图", [("robot__reset_map", {})]),
    ("打扫厨房和车库", [("robot__clean", {"room": "kitchen"}), ("robot__clean", {"room": "garage"})]),
    (
        "vacuum the living room 3 times then go charge",
        [
            ("robot__clean", {"room": "living room", "passes": 3}),
            ("robot__dock", {}),
        ],
    ),
    ("帮我把客厅打扫一下吧", [("robot__clean", {"room": "living room"})]),
    ("don't vacuum the bedroom", []),
    ("dock", [("robot__dock", {})]),
    ("打掃臥室", [("robot__clean", {"room": "bedroom"})]),
    ("vacum the kitchen", []),
    ("帮我吸尘客厅", [("robot__clean", {"room": "living room"})]),
    ("vacuum kitchen x2", [("robot__clean", {"room": "kitchen", "passes": 2})]),
    ("go home", [("robot__dock", {})]),
    ("mop the kitchen", []),
    ("打扫書房", []),
    ("打扫车库三遍然后回充", [("robot__clean", {"room": "garage", "passes": 3}), ("robot__dock", {})]),
]


def run_plan(
    request: str, open_jobs: tuple[OpenJob, ...] | None = None, surface: ToolSurface = SURFACE
) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """Drive the model as the session would, answering every call with a completed result (running
    with a fresh job id for a background tool)."""
    model = OfflineModel()
    background = {tool.name for tool in surface.tools if tool.background}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "system prompt"},
        {"role": "user", "content": request},
    ]
    made: list[tuple[str, dict[str, Any]]] = []
    for _ in range(10):
        context = TurnContext(open_jobs=open_jobs)
        response = asyncio.run(model.complete(messages, surface.tools, context=context))
        if not response.tool_calls:
            return made, response.text
        assert len(response.tool_calls) == 1  # serial: one call per decision
        call = response.tool_calls[0]
        made.append((call.name, call.arguments))
        messages.append(response.to_message())
        result = {
            "task_id": call.name,
            "execution_id": f"job-{len(made)}",
            "status": "running" if call.name in background else "completed",
            "message": "ok",
            "data": {},
        }
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    raise AssertionError("the planner did not finish")


@pytest.mark.parametrize(("request_text", "expected"), TABLE, ids=[r for r, _ in TABLE])
def test_planner_table(request_text: str, expected: Calls) -> None:
    made, final = run_plan(request_text)
    assert made == expected
    assert final  # it always reports
    if not expected:
        assert any(
            word in final for word in ("没有执行", "ran nothing", "not run anything", "做不到", "can't")
        ), final


@pytest.mark.parametrize(("request_text", "expected"), ROBOT_TABLE, ids=[r for r, _ in ROBOT_TABLE])
def test_planner_table_on_a_second_toolkit(request_text: str, expected: Calls) -> None:
    from tests.support.robot import robot

    made, final = run_plan(request_text, surface=ToolSurface(robot, "agent"))
    assert made == expected
    assert final


def test_the_table_is_large_and_in_both_languages() -> None:
    rows = TABLE + ROBOT_TABLE
    zh = [r for r, _ in rows if any("\u4e00" <= ch <= "\u9fff" for ch in r)]
    assert len(rows) >= 120 and len(zh) >= 50 and len(rows) - len(zh) >= 50


@pytest.mark.parametrize(
    ("request_text", "asks_for", "allowed"),
    [
        ("刷副本", "副本类型", GOLD),
        ("刷金花", "副本选哪一个", "藏珍之蕾"),
        ("farm 3 times", "instance type", "凝滞虚影"),
        ("分解遗器", "遗器星级", "4"),
        ("salvage relics", "rarity", "4"),
        ("打扫一下", "房间", "kitchen"),
    ],
)
def test_ambiguous_requests_are_answered_with_the_allowed_values(
    request_text: str, asks_for: str, allowed: str
) -> None:
    from tests.support.robot import robot

    surface = ToolSurface(robot, "agent") if "打扫" in request_text else SURFACE
    made, final = run_plan(request_text, surface=surface)
    assert made == []
    assert asks_for in final and allowed in final
    assert ("instance" not in final and "rarity" not in final) if "\u4e00" <= request_text[0] else True


def test_it_says_plainly_what_it_cannot_do() -> None:
    made, final = run_plan("帮我订一张机票")
    assert made == [] and "做不到" in final and "“启动游戏”" in final and "什么都没有执行" in final
    made, final = run_plan("book me a flight")
    assert made == [] and "can't" in final


def test_control_tools_use_the_open_job() -> None:
    assert run_plan("进度怎么样", OPEN_JOB)[0] == [("get_task_status", {"execution_id": JOB})]
    assert run_plan("stop it", OPEN_JOB)[0] == [("stop_task", {"execution_id": JOB})]
    assert run_plan("别刷了", OPEN_JOB)[0] == [("stop_task", {"execution_id": JOB})]
    assert run_plan("cancel the job", OPEN_JOB)[0] == [("stop_task", {"execution_id": JOB})]
    assert run_plan("stop farming", OPEN_JOB)[0] == [("stop_task", {"execution_id": JOB})]
    made, final = run_plan("停下")
    assert made == [] and "没有正在运行的后台任务" in final


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
    assert not final.tool_calls and "失败" in final.text and "没有继续" in final.text


@pytest.mark.parametrize(
    ("text", "value"), [("三", 3), ("十二", 12), ("二十五", 25), ("两", 2), ("一百", 100)]
)
def test_chinese_numbers(text: str, value: int) -> None:
    assert zh_number(text) == value


def test_numbers_in_text_ignore_words_that_only_look_like_numbers() -> None:
    assert numbers_in("一直刷") == []
    assert numbers_in("刷 3 次，再刷两次, then twice") == [3, 2, 2]


def _converse(model: OfflineModel, turns: list[str], surface: ToolSurface = SURFACE) -> list[Any]:
    """Several person messages on one thread; returns each turn's first response."""
    messages: list[dict[str, Any]] = []
    out = []
    for text in turns:
        messages.append({"role": "user", "content": text})
        response = asyncio.run(model.complete(messages, surface.tools, context=TurnContext(open_jobs=())))
        out.append(response)
        messages.append(response.to_message())
    return out


def test_an_answer_to_a_question_completes_the_request_that_led_to_it() -> None:
    first, second, third = _converse(OfflineModel(), ["刷三次副本", "金花", "经验"])
    assert not first.tool_calls and "副本类型" in first.text
    assert not second.tool_calls and "副本选哪一个" in second.text and "回忆之蕾" in second.text
    assert [(c.name, c.arguments) for c in third.tool_calls] == [farm("回忆之蕾", 3)]


def test_a_stray_yes_replays_nothing() -> None:
    model = OfflineModel()
    messages = [{"role": "user", "content": "yes"}]
    context = TurnContext(open_jobs=(), stray_answer=True)
    response = asyncio.run(model.complete(messages, SURFACE.tools, context=context))
    assert not response.tool_calls and "Nothing is waiting" in response.text
    messages = [{"role": "user", "content": "是"}]
    response = asyncio.run(model.complete(messages, SURFACE.tools, context=context))
    assert not response.tool_calls and "没有等你确认" in response.text


@pytest.mark.parametrize(
    ("request_text", "words"),
    [
        ("what can you do?", ["start the game", "salvage", "asks you first"]),
        ("what can the game bot do", ["start the game"]),
        ("你能干啥", ["启动游戏", "分解遗器", "需要你确认"]),
        ("help", ["start the game"]),
    ],
)
def test_what_can_you_do_is_a_short_real_summary(request_text: str, words: list[str]) -> None:
    made, final = run_plan(request_text)
    assert made == [] and all(word in final for word in words), final
    assert "debug" not in final  # only what this caller may use


@pytest.mark.parametrize(
    ("request_text", "guess"),
    [
        ("strat the game", "start the game"),
        ("farm gld 3 times", "farm gold 3 times"),
        ("启懂游戏", "启动游戏"),
        ("salvge 4-star relics", "salvage"),
    ],
)
def test_a_typo_close_to_a_known_word_is_asked_about(request_text: str, guess: str) -> None:
    made, final = run_plan(request_text)
    assert made == [] and guess in final and ("Did you mean" in final or "你是说" in final)


def test_state_questions_with_an_open_job_go_to_the_job() -> None:
    for question in (
        "how is it going",
        "刷得怎么样了",
        "进度如何？",
        "is it done yet?",
        "how's the farming going?",
    ):
        assert run_plan(question, OPEN_JOB)[0] == [("get_task_status", {"execution_id": JOB})], question
    assert run_plan("is the game running?", OPEN_JOB)[0] == [STATUS]


@given(st.text(max_size=80))
@settings(max_examples=300, deadline=None)
def test_any_text_gets_an_answer_never_an_exception(text: str) -> None:
    response = asyncio.run(
        OfflineModel().complete([{"role": "user", "content": text}], SURFACE.tools, context=TurnContext())
    )
    assert response.text or response.tool_calls
