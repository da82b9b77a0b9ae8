"""Free values (paths, name patterns, quoted or trailing text) and the tool a request names by its verb
when it names a file: the standard toolkit's files, read with the offline model (issue 23)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.models.test_offline import OPEN_JOB, run_plan
from tether.agent.surface import ToolSurface
from tether.models.offline_free import free_values
from tether.toolkits.standard import registry

STANDARD = ToolSurface(registry, "agent")


@pytest.mark.parametrize(
    ("request_text", "expected"),
    [
        ("open notes.txt", [("workspace__read", {"path": "notes.txt"})]),
        ("read README.md", [("workspace__read", {"path": "README.md"})]),  # the case as written
        ("打开 plan.md 看看", [("workspace__read", {"path": "plan.md"})]),
        ("删掉 tmp.txt", [("workspace__delete", {"path": "tmp.txt"})]),
        ("remove backup.zip", [("workspace__delete", {"path": "backup.zip"})]),
        ("找一下所有的 pdf 文件", [("workspace__find", {"pattern": "*.pdf"})]),
        ("move a.md to docs/a.md", [("workspace__move", {"src": "a.md", "dst": "docs/a.md"})]),
        ("grep the files for TODO", [("workspace__grep", {"text": "TODO"})]),
        ("删掉 v2.txt", [("workspace__delete", {"path": "v2.txt"})]),  # the 2 is a name, not a count
    ],
)
def test_a_file_request_names_its_path(request_text: str, expected: list[tuple[str, dict[str, Any]]]) -> None:
    made, _ = run_plan(request_text, (), surface=STANDARD)
    assert made == expected


def test_a_missing_path_is_asked_for_in_words_not_as_a_choice() -> None:
    made, final = run_plan("读文件", (), surface=STANDARD)
    assert made == [] and "请告诉我路径" in final and "选哪一个" not in final


def test_free_values_are_found_in_order_and_never_overlap() -> None:
    found = free_values("move a.md to docs/a.md, then find *.pdf and grep 'to do'")
    assert [(f.kind, f.value) for f in found] == [
        ("path", "a.md"),
        ("path", "docs/a.md"),
        ("pattern", "*.pdf"),
        ("text", "to do"),
    ]


@pytest.mark.parametrize(
    ("request_text", "expected"),
    [
        ("游戏可以关了", [("demo__exit_game", {})]),
        ("二星遗器全分解了", [("demo__salvage_relics", {"rarity": 2})]),
        ("start up the game please", [("demo__start_game", {})]),
        ("别挂机了", [("stop_task", {"execution_id": OPEN_JOB[0].execution_id})]),
        ("打开游戏，刷金币，然后退出", None),  # the verb-last reading never swallows a whole plan
    ],
)
def test_verbs_said_last_or_with_a_particle(request_text: str, expected: Any) -> None:
    made, _ = run_plan(request_text, OPEN_JOB)
    if expected is None:
        assert [name for name, _ in made] == ["demo__start_game", "demo__farm_instance", "demo__exit_game"]
    else:
        assert made == expected
