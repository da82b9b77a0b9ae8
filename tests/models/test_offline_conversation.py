"""What the offline model reads from the conversation: the request a turn answers and the calls made."""

import json

from tether.models.base import Message, OpenJob, TurnContext
from tether.models.offline_conversation import latest_job, request_of, results_since

ASKED: list[Message] = [
    {"role": "user", "content": "关闭游戏"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {"name": "x"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"status": "needs_confirmation"})},
    {"role": "user", "content": "no"},
]


def test_a_no_declines_the_request_that_led_to_the_question_in_its_language() -> None:
    request = request_of(ASKED, TurnContext(answer=False))
    assert request.declined and request.text == "关闭游戏"


def test_a_yes_carries_on_with_the_request_that_led_to_the_question() -> None:
    request = request_of(ASKED, TurnContext(answer=True))
    assert not request.declined and request.text == "关闭游戏" and request.anchor == 0


def test_a_yes_or_no_with_nothing_waiting_is_stray() -> None:
    request = request_of([{"role": "user", "content": "yes"}], TurnContext(stray_answer=True))
    assert request.stray and request.text == "yes"


def test_an_answer_to_which_one_completes_the_earlier_request() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "刷副本"},
        {"role": "assistant", "content": "请问副本选哪一个？可选：金、赤。我还什么都没有执行。"},
        {"role": "user", "content": "金"},
    ]
    request = request_of(messages, TurnContext())
    assert request.text == "刷副本，金" and request.anchor == 2


def test_a_call_waiting_for_confirmation_is_not_a_call_made() -> None:
    done = {"status": "completed", "message": "ok"}
    messages: list[Message] = [
        *ASKED[:3],
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c2", "function": {"name": "y"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": json.dumps(done)},
        {"role": "tool", "tool_call_id": "c3", "content": "not json"},
    ]
    assert results_since(messages, 0) == [
        ("y", done),
        ("tool", {"status": "failed", "message": "not json"}),
    ]


def test_the_newest_open_job_is_one_the_conversation_did_not_see_end() -> None:
    def said(status: str, eid: str) -> Message:
        return {
            "role": "tool",
            "tool_call_id": "c",
            "content": json.dumps({"status": status, "execution_id": eid}),
        }

    assert latest_job([said("running", "a"), said("running", "b"), said("stopped", "b")], None) == "a"
    assert latest_job([said("running", "a")], ()) is None  # the loop's own list is fresh: it wins
    fresh = (OpenJob(execution_id="c", task_id="demo.loop_farm", status="running"),)
    assert latest_job([], fresh) == "c"
