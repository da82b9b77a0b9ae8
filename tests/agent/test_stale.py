"""Stale reads fold (seed 001 §4.3.6): a file read before a completed call changed it is shown to the
model as stale, so it never edits from the old copy; the thread's record keeps the read as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import FAST
from tether.agent.session import ConversationSession
from tether.agent.stale import fold_stale_reads
from tether.config import AgentSettings
from tether.execution.executor import Executor
from tether.models.base import Message
from tether.tasks.spec import TaskSpec
from tether.testing import ScriptedModel, call, calls, say
from tether.toolkits.workspace.specs import registry as workspace


def _tool_messages(messages: list[Message]) -> list[str]:
    return [str(m["content"]) for m in messages if m["role"] == "tool"]


def test_a_read_before_a_write_of_the_same_file_is_shown_stale(tmp_path: Path) -> None:
    """Read, then overwrite (confirmed by the person): the model answers from the new file, never the old."""
    model = ScriptedModel(
        [
            calls(call("workspace__read", {"path": "notes.txt"}, id="r1")),
            calls(
                call("workspace__write", {"path": "./notes.txt", "content": "v2", "overwrite": True}, id="w1")
            ),
            calls(call("workspace__read", {"path": "notes.txt"}, id="r2")),
            say("notes.txt now says v2."),
        ]
    )
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "workspace" / "notes.txt").write_text("v1", encoding="utf-8")
    with Executor(workspace, home=home, settings=FAST) as executor:
        session = ConversationSession(executor, model, settings=AgentSettings(memory="ephemeral"))
        asked = session.send_sync("t", "write v2 into notes.txt")
        assert asked.status == "needs_confirmation", asked
        result = session.send_sync("t", "yes")
        assert result.status == "completed", result
        recorded = _tool_messages(session.threads.messages("t"))
    assert (home / "workspace" / "notes.txt").read_text(encoding="utf-8") == "v2"
    before_write = _tool_messages(model.requests[1][0])
    assert "stale" not in before_write[0] and "v1" in before_write[0]  # nothing changed it yet
    after_write = _tool_messages(model.requests[2][0])
    assert "stale" in after_write[0] and "workspace.write" in after_write[0] and "notes.txt" in after_write[0]
    assert "v1" not in after_write[0]
    # The write asked first, then ran once confirmed: both answers stay as they were.
    assert [json.loads(m)["status"] for m in after_write[1:]] == ["needs_confirmation", "completed"]
    last = _tool_messages(model.requests[3][0])
    assert "stale" in last[0] and "v2" in last[-1]  # the read after the write is fresh
    assert "stale" not in recorded[0] and "v1" in recorded[0]  # the thread's record keeps what was read


def _spec(task_id: str, **effects: Any) -> TaskSpec:
    from pydantic import BaseModel

    class Params(BaseModel):
        path: str = ""
        src: str = ""
        dst: str = ""

    return TaskSpec(task_id=task_id, handler="m:f", params=Params, **effects)


SPECS = {
    "f__read": _spec("f.read", reads=("path",)),
    "f__write": _spec("f.write", writes=("path",)),
    "f__move": _spec("f.move", writes=("src", "dst")),
}


def _history(*steps: tuple[str, dict[str, Any], str]) -> list[Message]:
    out: list[Message] = []
    for n, (name, arguments, status) in enumerate(steps):
        call_id = f"c{n}"
        function = {"name": name, "arguments": json.dumps(arguments)}
        out.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            }
        )
        out.append(
            {"role": "tool", "tool_call_id": call_id, "name": name, "content": json.dumps({"status": status})}
        )
    return out


@pytest.mark.parametrize("language", ["en", "zh"])
def test_only_reads_of_a_changed_file_before_a_completed_change_fold(language: str) -> None:
    history = _history(
        ("f__read", {"path": "a.txt"}, "completed"),  # 1: folded by the move of a.txt (step 5)
        ("f__read", {"path": "b.txt"}, "completed"),  # 3: never changed
        ("f__write", {"path": "b.txt"}, "rejected"),  # 5: did not change b.txt
        ("f__read", {"path": "c/../a.txt"}, "not_found"),  # 7: the same file, even a failed read
        ("f__move", {"src": "a.txt", "dst": "d.txt"}, "completed"),  # 9
        ("f__read", {"path": "a.txt"}, "completed"),  # 11: after the change, fresh
        ("get_task_status", {"execution_id": "x"}, "completed"),  # 13: no spec
    )
    folded = fold_stale_reads(history, SPECS.get, language)
    stale = [i for i, m in enumerate(folded) if m != history[i]]
    assert stale == [1, 7]
    word = "过时" if language == "zh" else "stale"
    assert all(word in str(folded[i]["content"]) and "f.move" in str(folded[i]["content"]) for i in stale)
    assert all(
        folded[i]["role"] == "tool" and folded[i]["tool_call_id"] == history[i]["tool_call_id"] for i in stale
    )


def test_a_spec_names_only_its_own_parameters_as_paths() -> None:
    from tether.errors import RegistryError

    with pytest.raises(RegistryError, match="writes names 'target', which is not a parameter"):
        _spec("f.bad", writes=("target",))
