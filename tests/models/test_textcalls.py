"""Tool calls a model writes as text: near misses are taken, attempts that cannot be are named, and
nothing else is mistaken for a call. The shapes are those a real small model wrote (notes/real-model.md)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.models.base import ToolDef
from tether.models.textcalls import read, resolve_name

START = ToolDef(
    name="demo__start_game",
    description="Start the game.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)
FARM = ToolDef(
    name="demo__farm_instance",
    description="Farm.",
    parameters={
        "type": "object",
        "properties": {"instance_name": {"type": "string"}, "attempts": {"type": "integer"}},
        "required": ["instance_name"],
        "additionalProperties": False,
    },
)
SALVAGE = ToolDef(
    name="demo__salvage_relics",
    description="Salvage.",
    parameters={"type": "object", "properties": {"instance_name": {"type": "string"}}},
)
OTHER_START = ToolDef(name="robot__start_game", description="Another toolkit's.", parameters=START.parameters)
TOOLS = [START, FARM]
WANT = [("demo__farm_instance", {"instance_name": "gold"})]


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "demo__farm_instance", "arguments": {"instance_name": "gold"}}\n</tool_call>',
        '{"name": "demo__farm_instance", "parameters": {"instance_name": "gold"}}',
        '```json\n{"name": "demo__farm_instance", "arguments": {"instance_name": "gold"}}\n```',
        '{"function": {"name": "demo__farm_instance", "arguments": "{\\"instance_name\\": \\"gold\\"}"}}',
        '[{"name": "demo__farm_instance", "arguments": {"instance_name": "gold"}}]',
        # near misses a real small model writes
        '{"name": "farm_instance", "arguments": {"instance_name": "gold"}}',  # no toolkit prefix
        '{"function_name": "demo__farm_instance", "arguments": {"instance_name": "gold"}}',
        '{"name": "demo.farm_instance", "args": {"instance_name": "gold"}}',
        "好的，我来刷副本：\n```json\n"
        '{"name": "farm_instance", "arguments": {"instance_name": "gold"}}\n```\n',  # a sentence around it
        # read leniently: single quotes, a trailing comma
        "<tool_call>{'name': 'farm_instance', 'arguments': {'instance_name': 'gold',}}</tool_call>",
        '{"type": "function", "function": {"name": "farm_instance", "arguments": {"instance_name": "gold"}}}',
        '{"tool_calls": [{"name": "demo__farm_instance", "arguments": {"instance_name": "gold"}}]}',
        # Qwen2.5-Coder-1.5B on llama-server: the tool's definition echoed, values in its schema, in <tools>
        '<tools>\n{"type": "function", "function": {"name": "demo__farm_instance", "description": "Farm.", '
        '"parameters": {"type": "object", "properties": {"instance_name": "gold"}, '
        '"required": ["instance_name"]}}}\n</tools>',
    ],
)
def test_a_call_written_as_text_is_taken(text: str) -> None:
    reading = read(text, TOOLS)
    assert [(c.name, c.arguments) for c in reading.calls] == WANT, reading
    assert not reading.attempt


def test_a_call_with_a_made_up_result_after_it_is_the_call_alone() -> None:
    """Qwen2.5-Coder-1.5B wrote the salvage call, then in a fence the result it imagined."""
    text = (
        '{"name": "demo__salvage_relics", "arguments": {"instance_name": "x"}}\n```\n'
        '{"task_id": "demo.salvage_relics", "status": "completed", "message": "all salvaged"}\n```'
    )
    reading = read(text, [*TOOLS, SALVAGE])
    assert [c.name for c in reading.calls] == ["demo__salvage_relics"] and reading.prose == ""


def test_one_call_per_line_keeps_their_order_and_the_prose() -> None:
    text = (
        "I'll do both.\n"
        '{"name": "start_game", "arguments": {}}\n'
        '{"name": "farm_instance", "arguments": {"instance_name": "gold", "attempts": 2}}'
    )
    reading = read(text, TOOLS)
    assert [c.name for c in reading.calls] == ["demo__start_game", "demo__farm_instance"]
    assert reading.prose == "I'll do both."


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"name": "rm_rf", "arguments": {}}', "not a tool"),
        ('{"name": "demo__farm_instance", "arguments": {}}', "needs instance_name"),
        (
            '{"name": "demo__farm_instance", "arguments": {"instance_name": "x", "sudo": true}}',
            "takes no sudo",
        ),
        ("<tool_call>not json at all</tool_call>", "not a JSON call"),
        (
            'I would call {"name": "demo__farm_instance", "arguments": {"instance_name": "x"}} next.',
            "sentence",
        ),
        ("Sure! start_game()", "written as code"),
        ("<tool_call>", "marker"),
        ("<tool_response>\n</tool_response>\n", "template markup"),  # Qwen2.5-Coder-1.5B's last answer once
        # and a result it made up for a farm that never ran (shown as the answer, status completed)
        (
            '<tool_response>\n{"task_id": "demo.farm_instance", "status": "completed", "message": "done"}',
            "instead of calling",
        ),
        ('```json\n{"task_id": "demo.farm_instance", "status": "completed"}\n```', "instead of calling"),
    ],
)
def test_an_attempt_that_cannot_be_taken_says_why(text: str, why: str) -> None:
    reading = read(text, TOOLS)
    assert reading.attempt and not reading.calls and why in reading.why, reading


def test_a_name_shared_by_two_toolkits_is_not_guessed() -> None:
    name, why = resolve_name("start_game", [START, OTHER_START])
    assert name is None and "demo__start_game" in why and "robot__start_game" in why
    reading = read('{"name": "start_game", "arguments": {}}', [START, OTHER_START, FARM])
    assert reading.attempt and not reading.calls


@pytest.mark.parametrize(
    "text",
    [
        "The game is running.",
        "游戏已经启动了。",
        "{not json}",
        '{"temperature": 21, "unit": "C"}',  # JSON the person asked for is an answer
        "```python\ndef start():\n    return 1\n```",  # code in another language too
        "```json\n[1, 2, 3]\n```",
        "It costs (about) 3 coins.",
    ],
)
def test_an_answer_is_not_mistaken_for_a_call(text: str) -> None:
    reading = read(text, TOOLS)
    assert not reading.calls and not reading.attempt, reading


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_is_read_without_error(text: str) -> None:
    reading = read(text, TOOLS)
    assert isinstance(reading.attempt, bool)
    assert all(c.name in {"demo__start_game", "demo__farm_instance"} for c in reading.calls)
