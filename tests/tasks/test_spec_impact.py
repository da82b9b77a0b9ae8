"""``TaskSpec.impact``: what one call would touch, for the person's question; checked like the other
``module:function`` fields, and a broken one says so instead of hiding the question."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.errors import RegistryError
from tether.tasks.spec import TaskSpec
from tether.toolkits.workspace.specs import registry


def test_an_impact_must_name_a_function() -> None:
    with pytest.raises(RegistryError, match=r"impact must be 'package\.module:function'"):
        TaskSpec(task_id="x.y", handler="m:f", impact="not a function path")


def test_a_broken_impact_says_so_in_the_persons_language(tmp_path: Path) -> None:
    missing = TaskSpec(task_id="x.y", handler="m:f", impact="tether.nowhere:describe")
    assert "cannot be told" in (missing.impact_of(tmp_path, {}, "en") or "")
    assert "无法得知" in (missing.impact_of(tmp_path, {}, "zh") or "")
    assert TaskSpec(task_id="x.y", handler="m:f").impact_of(tmp_path, {}, "en") is None


def test_the_workspace_tasks_that_ask_say_what_they_touch(tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "a.txt").write_text("abc")
    delete = registry.spec("workspace.delete")
    assert delete.impact_of(tmp_path, {"path": "a.txt", "recursive": False}, "en") == (
        "it deletes the file a.txt (1 file, 3 bytes)"
    )
    assert delete.impact_of(tmp_path, {"path": "a.txt", "recursive": False}, "zh") == (
        "将删除文件 a.txt（1 个文件，共 3 字节）"
    )
    missing = delete.impact_of(tmp_path, {"path": "nope.txt"}, "en") or ""
    assert missing.startswith("tether will refuse it:") and "no such file" in missing
