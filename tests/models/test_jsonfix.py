import asyncio
from collections.abc import Sequence

import pytest

from tether.errors import ModelOutputError
from tether.models.base import Message, ModelResponse, ToolDef
from tether.models.jsondecide import JsonDecisionModel, parse_decision
from tether.models.jsonfix import loads_lenient
from tether.testing import ScriptedModel, say

CORPUS = [
    ('{"action": "a", "args": {"x": 1}}', {"action": "a", "args": {"x": 1}}),
    ('```json\n{"action": "a", "args": {"x": 1,},}\n```', {"action": "a", "args": {"x": 1}}),
    ('Sure! Here you go:\n```\n{"final": "done"}\n```\nAnything else?', {"final": "done"}),
    ("{'final': 'single quotes'}", {"final": "single quotes"}),
    ('I will call it: {"action": "b", "args": {"s": "}{"}} — ok?', {"action": "b", "args": {"s": "}{"}}),
    ('{"action": "c", "args": {"n": 3', {"action": "c", "args": {"n": 3}}),
    ('{"thought": "x" "action": "d"}', {"thought": "x", "action": "d"}),
    (
        '思考：先启动游戏。\n{"thought": "启动", "action": "demo__start_game", "args": {}}',
        {"thought": "启动", "action": "demo__start_game", "args": {}},
    ),
    ('{"final": "line\\nbreak"}', {"final": "line\nbreak"}),
    ('{} {"final": "the second object"}', {"final": "the second object"}),
]


@pytest.mark.parametrize(("text", "expected"), CORPUS)
def test_dirty_outputs_are_parsed(text: str, expected: dict[str, object]) -> None:
    assert loads_lenient(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "[1, 2, 3]", "{}"])
def test_text_without_an_object_is_none(text: str) -> None:
    assert loads_lenient(text) is None


def test_decisions_name_what_is_wrong() -> None:
    assert parse_decision('{"action": "nope"}', {"a"}) == "'nope' is not a tool; tools are: a"
    assert "neither" in str(parse_decision('{"thought": "hm"}', {"a"}))
    assert isinstance(parse_decision('{"final": "ok"}', {"a"}), ModelResponse)


TOOLS = [
    ToolDef(name="demo__start_game", description="start", parameters={"type": "object", "properties": {}})
]


def test_one_repair_request_then_a_clear_failure() -> None:
    inner = ScriptedModel(
        [say("I think I should start the game."), say('{"action": "demo__start_game", "args": {}}')]
    )
    decision = asyncio.run(JsonDecisionModel(inner).complete([{"role": "user", "content": "start"}], TOOLS))
    assert decision.tool_calls[0].name == "demo__start_game"
    repair: Sequence[Message] = inner.requests[1][0]
    assert "cannot be used" in str(repair[-1]["content"]) and inner.requests[1][1] == []
    inner.assert_consumed()

    broken = ScriptedModel([say("no"), say("still no")])
    with pytest.raises(ModelOutputError, match="even after one repair"):
        asyncio.run(JsonDecisionModel(broken).complete([{"role": "user", "content": "start"}], TOOLS))
    broken.assert_consumed()


def test_an_empty_answer_gets_the_repair_request_too() -> None:
    def empty(messages: Sequence[Message], tools: Sequence[ToolDef]) -> ModelResponse:
        raise ModelOutputError(
            "the model answered with nothing: no text and no tool call", finish_reason="stop"
        )

    inner = ScriptedModel([empty, say('{"action": "demo__start_game", "args": {}}')])
    decision = asyncio.run(JsonDecisionModel(inner).complete([{"role": "user", "content": "start"}], TOOLS))
    assert decision.tool_calls[0].name == "demo__start_game"
    inner.assert_consumed()


def test_the_tool_block_leads_the_prompt_so_a_server_cache_keeps_it() -> None:
    inner = ScriptedModel([say('{"final": "ok"}'), say('{"final": "ok"}')])
    model = JsonDecisionModel(inner)
    system: Message = {"role": "system", "content": "You are tether's assistant."}
    first: list[Message] = [system, {"role": "user", "content": "hello"}]
    asyncio.run(model.complete(first, TOOLS))
    second = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
    asyncio.run(model.complete(second, TOOLS))
    sent_first, sent_second = inner.requests[0][0], inner.requests[1][0]
    assert "demo__start_game" in str(sent_first[0]["content"])  # the tools come first
    assert sent_second[: len(sent_first)] == sent_first  # and the first request is a prefix of the next
