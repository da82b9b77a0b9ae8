"""The offline model answers what it is asked (issue 23): a value it lacks is asked for with the values
allowed (never a false "no tool"), a question gets its answer, a capability question gets sentences to
say, and a question no tool knows about is said to be one, with nothing run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.models.test_offline import OPEN_JOB, SURFACE, run_plan
from tether.agent.surface import ToolSurface
from tether.models.base import TurnContext
from tether.models.offline import OfflineModel
from tether.models.offline_answers import example
from tether.models.understand import has_cjk
from tether.toolkits.demo.registry import registry

NO_TOOL = ("没有对应的工具", "none of my tools")
STATUS_DATA = {"running": True, "farm_attempts_total": 7, "daily_training_total": 1, "salvaged_total": 0}


def answered(question: str) -> tuple[list[str], str]:
    """A question's turn with the status tool answering the counters above."""
    model = OfflineModel()
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    made: list[str] = []
    for _ in range(5):
        response = asyncio.run(model.complete(messages, SURFACE.tools, context=TurnContext(open_jobs=())))
        if not response.tool_calls:
            return made, response.text
        call = response.tool_calls[0]
        made.append(call.name)
        messages.append(response.to_message())
        result = {"task_id": call.name, "execution_id": "e1", "status": "completed",
                  "message": "the game is running", "data": STATUS_DATA}  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    raise AssertionError("no answer")


@pytest.mark.parametrize(
    ("request_text", "offered"),
    [
        ("遗器太多了", ["分解遗器", "2", "3", "4"]),
        ("I have too many relics", ["salvage", "2", "3", "4"]),
        ("刷一次花萼", ["拟造花萼（金）", "拟造花萼（赤）"]),
        ("farm a calyx 2 times", ["拟造花萼（金）", "拟造花萼（赤）"]),
        ("分解五星遗器", ["2", "3", "4"]),
    ],
)
def test_a_tool_that_fits_asks_for_the_value_with_the_allowed_ones(
    request_text: str, offered: list[str]
) -> None:
    made, final = run_plan(request_text)
    assert made == [], final
    assert all(value in final for value in offered), final
    assert not any(phrase in final for phrase in NO_TOOL), final


def test_an_unknown_room_is_answered_with_the_rooms_that_exist() -> None:
    from tests.support.robot import robot

    made, final = run_plan("打扫阁楼", surface=ToolSurface(robot, "agent"))
    assert made == [] and "kitchen" in final and not any(phrase in final for phrase in NO_TOOL), final


@pytest.mark.parametrize(
    ("question", "count"), [("到现在刷了几次了", "7"), ("how many times have I farmed so far", "7")]
)
def test_a_count_question_is_answered_with_the_count(question: str, count: str) -> None:
    made, final = answered(question)
    assert made == ["demo__status"] and count in final, final


@pytest.mark.parametrize(
    "question", ["看看后台任务进度", "后台任务怎么样了", "how are my background jobs doing?"]
)
def test_a_question_about_jobs_with_none_says_there_are_none(question: str) -> None:
    made, final = run_plan(question, ())
    assert made == [] and ("没有正在运行的后台任务" in final or "No background job" in final), final


def test_jobs_questions_still_go_to_the_open_job() -> None:
    assert run_plan("看看后台任务进度", OPEN_JOB)[0] == [
        ("get_task_status", {"execution_id": OPEN_JOB[0].execution_id})
    ]


@pytest.mark.parametrize(
    "question",
    [
        "今天天气怎么样",
        "明天会下雨吗",
        "will it rain today?",
        "what's the weather like?",
        "how many people live in Paris?",
    ],
)
def test_a_question_no_tool_knows_about_runs_nothing_and_says_so(question: str) -> None:
    made, final = run_plan(question, ())
    assert made == [], final
    assert any(word in final for word in ("没法", "做不到", "can't")), final


@pytest.mark.parametrize(
    ("question", "values"),
    [
        ("有哪些副本可以刷？", ["拟造花萼（金）", "回忆之蕾", "凝滞虚影"]),
        ("which instances can I farm?", ["golden calyx", "凝滞虚影"]),
    ],
)
def test_which_values_is_answered_in_plain_words(question: str, values: list[str]) -> None:
    made, final = run_plan(question)
    assert made == [] and all(value in final for value in values), final
    assert "instance_type" not in final and "demo__" not in final


@pytest.mark.parametrize("zh", [True, False])
def test_every_example_sentence_offered_reads_back_as_its_tool(zh: bool) -> None:
    """The sentences the help offers are ones the planner itself understands as that call."""
    for surface in (SURFACE, ToolSurface(registry, "agent")):
        for tool in surface.business:
            if tool.background:
                continue  # a background example starts a job: its own test
            sentence = example(tool, zh)
            made, final = run_plan(sentence, ())
            assert [name for name, _ in made][:1] == [tool.name], (sentence, final)


@pytest.mark.parametrize("request_text", ["你能做什么？", "what can you do?", "help"])
def test_capabilities_are_sentences_to_say_in_the_persons_language(request_text: str) -> None:
    made, final = run_plan(request_text)
    assert made == [] and "“" in final and "demo__" not in final and "farm_instance" not in final
    zh = request_text.startswith("你")
    assert ("这样说" in final) if zh else ("for example" in final and "启动游戏" not in final)


def test_an_english_answer_to_which_one_completes_the_request_with_its_count() -> None:
    """The English question ends with "I have not run anything yet." — its answer was read alone,
    and the count of the request that led to it was lost."""
    from tests.models.test_offline import _converse, farm

    first, second, third = _converse(OfflineModel(), ["farm 3 times", "golden calyx", "exp"])
    assert not first.tool_calls and not second.tool_calls and "Which instance?" in second.text
    assert [(c.name, c.arguments) for c in third.tool_calls] == [farm("回忆之蕾", 3)]


@pytest.mark.parametrize(
    "request_text", ["凝滞虚影有哪些", "金币不够了", "经验书刷了吗不够", "刷凝滞虚影阁楼"]
)
def test_a_value_with_words_not_understood_is_answered_never_an_exception(request_text: str) -> None:
    made, final = run_plan(request_text, ())
    assert final and not any(name == "demo__salvage_relics" for name, _ in made)


@pytest.mark.parametrize(
    ("question", "present", "absent"),
    [
        ("凝滞虚影有哪些", "空海之形", "回忆之蕾"),  # the values under the one named
        ("分解遗器有哪些星级可以选", "- 4", "副本"),  # the label's words, not all of them in a row
    ],
)
def test_which_values_under_a_value_or_by_part_of_a_label(question: str, present: str, absent: str) -> None:
    made, final = run_plan(question, ())
    assert made == [] and present in final and absent not in final.split("比如")[0], final


@pytest.mark.parametrize("text", ["是", "yes", "好的，执行吧"])
def test_a_yes_reaching_the_model_with_nothing_waiting_is_not_a_request_it_cannot_do(text: str) -> None:
    made, final = run_plan(text, ())
    assert (
        made == []
        and not any(phrase in final for phrase in NO_TOOL)
        and ("确认" in final or "confirm" in final)
    )


WORDS = sorted(
    {a for tool in SURFACE.business for a in tool.aliases}
    | {w for tool in SURFACE.business for words in tool.value_words.values() for w in words}
    | {
        "回忆之蕾",
        "空海之形",
        "阁楼",
        "有哪些",
        "吗",
        "不",
        "别",
        "太多了",
        "几次",
        "？",
        "，",
        "3",
        "四星",
        "twice",
    }
    | {"what", "which", "how many", "not", "too many", "relics", "files", "notes.md", "'todo'", "了"}
)


@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
@settings(max_examples=300, deadline=None)
def test_any_mix_of_known_words_is_answered_and_never_salvages_unasked(words: list[str]) -> None:
    text = "".join(words) if all(has_cjk(w) for w in words) else " ".join(words)
    made, final = run_plan(text, OPEN_JOB)
    assert final or made
    if any(name == "demo__salvage_relics" for name, _ in made):
        assert any(word in text for word in ("分解", "salvage", "break down")), text


def test_an_unknown_value_is_quoted_as_written_and_a_count_question_is_not_one() -> None:
    made, final = run_plan("刷凝滞虚影阁楼", ())
    assert made == [] and "“阁楼”" in final and "空海之形" in final
    made, final = run_plan("一共刷了几遍", ())
    assert made == [("demo__status", {})] and "不认识" not in final
