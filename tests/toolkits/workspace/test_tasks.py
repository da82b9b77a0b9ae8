"""The workspace tasks through a real executor and real workers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import ToolRejected
from tether.execution.executor import Executor
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.validation import validate_params
from tether.toolkits.workspace.specs import registry


@pytest.fixture
def ws(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor(registry)


def run(
    executor: Executor, task: str, caller: str = "agent", confirm: bool = False, **params: object
) -> TaskResult:
    confirmation = executor.confirm(task, params, caller=caller, source="test:person") if confirm else None
    return executor.execute_sync(task, params, caller=caller, confirmation=confirmation)


def test_write_read_list_find_grep_in_chinese_and_english(ws: Executor, home: Path) -> None:
    written = run(
        ws, "workspace.write", path="报告/周报.md", content="# 周报\n本周完成了 tether 的工作区。\n"
    )
    assert written.status is TaskStatus.COMPLETED, written
    assert (home / "workspace" / "报告" / "周报.md").read_text(encoding="utf-8").startswith("# 周报")

    read = run(ws, "workspace.read", path="报告/周报.md")
    assert read.status is TaskStatus.COMPLETED, read
    assert "本周完成了" in read.data["text"] and read.data["encoding"] == "utf-8"

    listed = run(ws, "workspace.list", path="报告")
    assert [entry["name"] for entry in listed.data["entries"]] == ["周报.md"]

    found = run(ws, "workspace.find", pattern="周*")
    assert found.data["matches"] == [{"path": "报告/周报.md", "kind": "file"}]

    grep = run(ws, "workspace.grep", text="TETHER")
    assert grep.data["matches"] == [
        {"path": "报告/周报.md", "line": 2, "text": "本周完成了 tether 的工作区。"}
    ]


def test_gbk_files_are_written_and_read_back(ws: Executor, home: Path) -> None:
    assert (
        run(ws, "workspace.write", path="旧.txt", content="中文内容", encoding="gb18030").status
        is TaskStatus.COMPLETED
    )
    assert (home / "workspace" / "旧.txt").read_bytes() == "中文内容".encode("gb18030")
    read = run(ws, "workspace.read", path="旧.txt")
    assert read.data["text"] == "中文内容" and read.data["encoding"] == "gb18030"


def test_overwrite_needs_the_persons_confirmation(ws: Executor, home: Path) -> None:
    assert run(ws, "workspace.write", path="a.txt", content="one").status is TaskStatus.COMPLETED
    again = run(ws, "workspace.write", path="a.txt", content="two")
    assert again.status is TaskStatus.FAILED and "already exists; pass overwrite=true" in again.message
    unconfirmed = run(ws, "workspace.write", path="a.txt", content="two", overwrite=True)
    assert unconfirmed.status is TaskStatus.REJECTED and unconfirmed.data["needs_confirmation"] is True
    assert (home / "workspace" / "a.txt").read_text() == "one"
    confirmed = run(ws, "workspace.write", path="a.txt", content="two", overwrite=True, confirm=True)
    assert confirmed.status is TaskStatus.COMPLETED, confirmed
    assert (home / "workspace" / "a.txt").read_text() == "two"


def test_move_and_delete(ws: Executor, home: Path) -> None:
    run(ws, "workspace.write", path="draft.md", content="x")
    unconfirmed = run(ws, "workspace.move", src="draft.md", dst="final/报告.md")
    assert unconfirmed.status is TaskStatus.REJECTED and unconfirmed.data["danger"] == "caution"
    moved = run(ws, "workspace.move", src="draft.md", dst="final/报告.md", confirm=True)
    assert moved.status is TaskStatus.COMPLETED and moved.data == {"src": "draft.md", "dst": "final/报告.md"}
    refused = run(ws, "workspace.delete", path="final", recursive=True)
    assert refused.status is TaskStatus.REJECTED and refused.data["danger"] == "destructive"
    deleted = run(ws, "workspace.delete", path="final", recursive=True, confirm=True)
    assert deleted.status is TaskStatus.COMPLETED, deleted
    assert not (home / "workspace" / "final").exists()


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("C:\\Windows\\win.ini", "'\\' is not accepted"),
        ("D:notes", "Windows drive"),
        ("//server/share", "UNC"),
        ("a\x00b", "NUL"),
        ("aux.txt", "device name"),
    ],
)
def test_bad_paths_are_rejected_before_a_worker_starts(ws: Executor, path: str, expected: str) -> None:
    result = run(ws, "workspace.read", path=path)
    assert result.status is TaskStatus.REJECTED, result
    assert expected in result.message


def test_escapes_fail_with_a_clear_message(ws: Executor, home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    root = home / "workspace"
    root.mkdir(exist_ok=True)
    os.symlink(outside, root / "out")
    for task, params in (
        ("workspace.read", {"path": "out/secret.txt"}),
        ("workspace.read", {"path": "../settings.toml"}),
        ("workspace.write", {"path": "out/new.txt", "content": "x"}),
        ("workspace.list", {"path": str(tmp_path)}),
    ):
        result = ws.execute_sync(task, params, caller="agent")
        assert result.status is TaskStatus.FAILED, result
        assert "refused" in result.message and "workspace folder" in result.message
        assert "Traceback" not in result.message
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_binary_and_missing_files_fail_readably(ws: Executor, home: Path) -> None:
    root = home / "workspace"
    root.mkdir(exist_ok=True)
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    binary = run(ws, "workspace.read", path="blob.bin")
    assert binary.status is TaskStatus.FAILED and "Readable: text files" in binary.message
    missing = run(ws, "workspace.read", path="nope.txt")
    assert missing.status is TaskStatus.FAILED and "no such file" in missing.message


def test_results_stay_small(ws: Executor, home: Path) -> None:
    root = home / "workspace"
    root.mkdir(exist_ok=True)
    (root / "big.txt").write_text("很长的一行。\n" * 100_000, encoding="utf-8")
    for number in range(250):
        (root / f"f{number:03}.txt").write_text("needle\n")
    read = run(ws, "workspace.read", path="big.txt")
    assert read.data["clipped"] is True and len(read.data["text"]) <= 60_000 and "note" in read.data
    listed = run(ws, "workspace.list")
    assert len(listed.data["entries"]) == 200 and listed.data["more"] == 51
    grep = run(ws, "workspace.grep", text="needle")
    assert len(grep.data["matches"]) == 200 and grep.data["more"] == 50


def test_tasks_are_exposed_with_zh_and_en_aliases() -> None:
    for spec in registry:
        assert spec.exposed_to == {"agent", "cli", "mcp"}
        assert any(not alias.isascii() for alias in spec.aliases), spec.task_id
        assert any(alias.isascii() for alias in spec.aliases), spec.task_id
        assert spec.resources == (
            ("workspace",) if spec.task_id.split(".")[1] in {"write", "move", "delete"} else ()
        )


@given(st.text(max_size=200))
def test_any_path_text_is_validated_or_rejected_cleanly(text: str) -> None:
    spec = registry.spec("workspace.read")
    try:
        validate_params(spec, {"path": text})
    except ToolRejected as exc:
        assert exc.message.startswith("workspace.read: path:")
