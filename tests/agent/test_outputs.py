"""Which files a turn makes: the formats a person ticked replace the model's; a generate call with no
format gets one light follow-up decision; a follow-up that names none makes no file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.agent.session import ConversationSession
from tether.execution.executor import Executor
from tether.testing import ScriptedModel, call, calls, say
from tether.toolkits.standard import registry

CONTENT = "## 要点\n\n- 太阳能电池把光变成电"


@pytest.fixture
def executor(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor(registry=registry)


def generated(result: Any) -> list[Any]:
    steps = [s for s in result.steps if s.kind == "tool" and s.tool == "documents.generate"]  # type: ignore[attr-defined]
    return [s.result for s in steps]


def test_ticked_formats_replace_the_models_and_travel_with_the_question(
    executor: Executor, home: Path
) -> None:
    model = ScriptedModel([
        calls(call("documents__generate", {"title": "光伏", "content": CONTENT, "formats": ["html"]})),
        say("done"),
    ])  # fmt: skip
    session = ConversationSession(executor, model)
    result = asyncio.run(session.send("t1", "写成讲义", formats=["pdf", "md", "docx"]))
    model.assert_consumed()
    (done,) = generated(result)
    assert done["status"] == "completed"
    assert sorted(a["format"] for a in done["data"]["artifacts"]) == ["md", "pdf"]  # docx is not a format
    note = [m["content"] for m in model.requests[0][0] if m["role"] == "system"][-1]
    assert "pdf" in note and "documents__generate" in note


def test_a_call_without_formats_gets_one_follow_up_decision(executor: Executor) -> None:
    model = ScriptedModel([
        calls(call("documents__generate", {"title": "Solar", "content": CONTENT})),
        say(json.dumps({"formats": ["pptx"]})),  # the follow-up: asked with no tools
        say("done"),
    ])  # fmt: skip
    result = ConversationSession(executor, model).send_sync("t2", "make slides about solar power")
    model.assert_consumed()
    follow_up_messages, follow_up_tools = model.requests[1]
    assert follow_up_tools == [] and "make slides about solar power" in follow_up_messages[-1]["content"]
    assert (
        model.contexts[1] is not None
        and model.contexts[1].formats_question == "make slides about solar power"
    )
    (done,) = generated(result)
    assert [a["format"] for a in done["data"]["artifacts"]] == ["pptx"]


def test_a_follow_up_that_names_no_format_makes_no_file(executor: Executor, home: Path) -> None:
    model = ScriptedModel([
        calls(call("documents__generate", {"title": "Solar", "content": CONTENT})),
        say('{"formats": []}'),
        say("No file was needed."),
    ])  # fmt: skip
    result = ConversationSession(executor, model).send_sync("t3", "tell me about solar power")
    model.assert_consumed()
    (done,) = generated(result)
    assert done["status"] == "completed" and "no file generated" in done["message"]
    assert not (home / "artifacts").exists() or not any((home / "artifacts").iterdir())
