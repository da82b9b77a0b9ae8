"""The tether home below a workspace root stays tether's: no task moves, deletes, writes or reads it, its
ancestors or the roots, confirmed or not, and the person is told what a delete or a folder move affects.

Everything runs through a real executor and real workers, with the home at ``<user>/.config/tether`` and
the root ``<user>`` (the layout of ``~/.config/tether`` with the root ``~``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import FAST
from tether.agent.session import ConversationSession
from tether.execution.executor import Executor
from tether.tasks.result import TaskResult, TaskStatus
from tether.testing import ScriptedModel, call, calls, say
from tether.toolkits.workspace.specs import registry


class Layout:
    def __init__(self, user: Path, home: Path, executor: Executor) -> None:
        self.user, self.home, self.executor = user, home, executor

    def run(self, task: str, *, confirm: bool = False, **params: object) -> TaskResult:
        confirmation = (
            self.executor.confirm(task, params, caller="agent", source="test:person") if confirm else None
        )
        return self.executor.execute_sync(task, params, caller="agent", confirmation=confirmation)

    def home_state(self) -> dict[str, str]:
        """The person's settings and keys, and whether the database is still there."""
        found = {
            name: hashlib.sha256((self.home / name).read_bytes()).hexdigest()
            for name in ("settings.toml", "keys/secret.key")
        }
        found["database"] = str(any(self.home.glob("*.db")))
        return found


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Layout]:
    user = tmp_path / "user"
    home = user / ".config" / "tether"
    home.mkdir(parents=True)
    monkeypatch.setenv("TETHER_HOME", str(home))
    (home / "settings.toml").write_text(f'[workspace]\nroots = ["{user}"]\n', encoding="utf-8")
    (home / "keys").mkdir()
    (home / "keys" / "secret.key").write_bytes(b"KEY-MATERIAL")
    (home / "parent.pid").write_text(str(os.getpid()))
    (user / "proj").mkdir()
    (user / "proj" / "a.txt").write_text("aaaa")
    (user / "proj" / "sub").mkdir()
    (user / "proj" / "sub" / "b.txt").write_text("b" * 1000)
    (user / "proj" / "sub" / "c.txt").write_text("")
    executor = Executor(registry, home=home, settings=FAST)
    try:
        yield Layout(user, home, executor)
    finally:
        executor.close()


def assert_home_intact(layout: Layout, before: dict[str, str]) -> None:
    assert layout.home.is_dir() and (layout.home / "settings.toml").is_file()
    assert layout.home_state() == before


def test_moving_the_homes_parent_asks_first_and_is_refused_even_when_confirmed(layout: Layout) -> None:
    before = layout.home_state()
    unconfirmed = layout.run("workspace.move", src=".config", dst="elsewhere")
    assert unconfirmed.status is TaskStatus.REJECTED, unconfirmed
    assert unconfirmed.data["needs_confirmation"] is True
    confirmed = layout.run("workspace.move", src=".config", dst="elsewhere", confirm=True)
    assert confirmed.status is TaskStatus.FAILED, confirmed
    assert "tether home" in confirmed.message and confirmed.data["reason"] == "home"
    assert not (layout.user / "elsewhere").exists()
    assert_home_intact(layout, before)


def test_a_confirmed_recursive_delete_of_the_homes_parent_is_refused(layout: Layout) -> None:
    before = layout.home_state()
    for path in (".config", ".config/", str(layout.user / ".config"), "./.config", ".config/tether"):
        result = layout.run("workspace.delete", path=path, recursive=True, confirm=True)
        assert result.status is TaskStatus.FAILED, (path, result)
        assert "tether home" in result.message, (path, result.message)
    assert_home_intact(layout, before)


def test_nothing_inside_the_home_is_written_read_or_searched(layout: Layout) -> None:
    before = layout.home_state()
    refused = [
        ("workspace.write", {"path": ".config/tether/settings.toml", "content": "", "overwrite": True}),
        ("workspace.write", {"path": ".config/tether/keys/new.key", "content": "x"}),
        ("workspace.write", {"path": ".config/tether/tether.db", "content": "x", "overwrite": True}),
        ("workspace.read", {"path": ".config/tether/keys/secret.key"}),
        ("workspace.read", {"path": ".config/tether/settings.toml"}),
        ("workspace.list", {"path": ".config/tether/keys"}),
        ("workspace.find", {"pattern": "*", "path": ".config/tether"}),
        ("workspace.grep", {"text": "KEY", "path": ".config/tether"}),
        ("workspace.move", {"src": "proj/a.txt", "dst": ".config/tether/keys", "overwrite": True}),
        ("workspace.move", {"src": "proj/a.txt", "dst": ".config/tether/settings.toml", "overwrite": True}),
        ("workspace.move", {"src": "proj", "dst": ".config/tether"}),
        ("workspace.delete", {"path": ".config/tether/keys/secret.key"}),
    ]
    for task, params in refused:
        confirm = task in ("workspace.delete", "workspace.move") or bool(params.get("overwrite"))
        result = layout.run(task, confirm=confirm, **params)
        assert result.status is TaskStatus.FAILED, (task, params, result)
        assert "tether home" in result.message, (task, params, result.message)
    grep = layout.run("workspace.grep", text="KEY-MATERIAL")
    assert grep.status is TaskStatus.COMPLETED and grep.data["matches"] == [], grep
    found = layout.run("workspace.find", pattern="*.key")
    assert found.status is TaskStatus.COMPLETED and found.data["matches"] == [], found
    assert (layout.user / "proj" / "a.txt").read_text() == "aaaa"
    assert_home_intact(layout, before)


def test_links_to_the_home_do_not_reach_it(layout: Layout) -> None:
    before = layout.home_state()
    os.symlink(".config/tether", layout.user / "alias")
    os.symlink(".config", layout.user / "parent-alias")
    for task, params in (
        ("workspace.read", {"path": "alias/keys/secret.key"}),
        ("workspace.write", {"path": "alias/settings.toml", "content": "", "overwrite": True}),
        ("workspace.delete", {"path": "parent-alias/tether", "recursive": True}),
        ("workspace.move", {"src": "parent-alias/tether", "dst": "taken"}),
    ):
        result = layout.run(task, confirm=True, **params)
        assert result.status is TaskStatus.FAILED, (task, params, result)
        assert "tether home" in result.message, (task, params, result.message)
    # A link is its own name: deleting one (with or without a trailing '/') removes the link, never the
    # home it points to.
    unlinked = layout.run("workspace.delete", path="alias/", recursive=True, confirm=True)
    assert unlinked.status is TaskStatus.COMPLETED and unlinked.data["kind"] == "link", unlinked
    os.link(layout.home / "keys" / "secret.key", layout.user / "hard.key")
    hard = layout.run("workspace.read", path="hard.key")
    assert hard.status is TaskStatus.FAILED and b"KEY" not in str(hard.data).encode()
    assert_home_intact(layout, before)


def test_the_link_tether_finds_its_home_through_is_never_moved_or_deleted(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TETHER_HOME names the home through a link inside the root: removing the link would make the next
    # start create a fresh, empty home there.
    os.symlink(".config/tether", layout.user / ".tether-link")
    monkeypatch.setenv("TETHER_HOME", str(layout.user / ".tether-link"))
    executor = Executor(registry, home=layout.user / ".tether-link", settings=FAST)
    try:
        for task, params in (
            ("workspace.delete", {"path": ".tether-link"}),
            ("workspace.move", {"src": ".tether-link", "dst": "moved-link"}),
        ):
            confirmation = executor.confirm(task, params, caller="agent", source="test:person")
            result = executor.execute_sync(task, params, caller="agent", confirmation=confirmation)
            assert result.status is TaskStatus.FAILED, (task, result)
            assert "tether home" in result.message, result.message
        assert os.path.islink(layout.user / ".tether-link")
    finally:
        executor.close()


def test_moving_a_folder_asks_the_person_first(layout: Layout) -> None:
    refused = layout.run("workspace.move", src="proj", dst="project")
    assert refused.status is TaskStatus.REJECTED and refused.data["needs_confirmation"] is True, refused
    assert (layout.user / "proj").is_dir() and not (layout.user / "project").exists()
    moved = layout.run("workspace.move", src="proj", dst="project", confirm=True)
    assert moved.status is TaskStatus.COMPLETED, moved
    assert (layout.user / "project" / "sub" / "b.txt").is_file()


def test_a_delete_says_how_many_files_and_bytes_it_removed(layout: Layout) -> None:
    deleted = layout.run("workspace.delete", path="proj", recursive=True, confirm=True)
    assert deleted.status is TaskStatus.COMPLETED, deleted
    assert deleted.data["files"] == 3 and deleted.data["bytes"] == 1004 and deleted.data["folders"] == 2
    assert "3 files" in deleted.message


@pytest.mark.parametrize(
    ("message", "call_args", "expected"),
    [
        (
            "delete proj",
            ("workspace__delete", {"path": "proj", "recursive": True}),
            ("3 files", "1004 bytes"),
        ),
        (
            "删除 proj 文件夹",
            ("workspace__delete", {"path": "proj", "recursive": True}),
            ("3 个文件", "1004 字节"),
        ),
        ("move proj to old", ("workspace__move", {"src": "proj", "dst": "old"}), ("3 files", "1004 bytes")),
        ("把 proj 移到 old", ("workspace__move", {"src": "proj", "dst": "old"}), ("3 个文件", "1004 字节")),
        ("delete a.txt", ("workspace__delete", {"path": "proj/a.txt"}), ("1 file", "4 bytes")),
    ],
)
def test_the_question_says_how_many_files_and_bytes_are_affected(
    layout: Layout, message: str, call_args: tuple[str, dict[str, object]], expected: tuple[str, str]
) -> None:
    model = ScriptedModel([calls(call(*call_args)), say("done")])
    session = ConversationSession(layout.executor, model)
    asked = session.send_sync("t", message)
    assert asked.status == "needs_confirmation", asked
    for words in expected:
        assert words in asked.final, asked.final
    # Computed when asked: a file added before the question is counted.
    assert (layout.user / "proj").is_dir()


def test_the_question_is_computed_when_it_is_asked(layout: Layout) -> None:
    (layout.user / "proj" / "late.txt").write_text("12345")
    model = ScriptedModel([calls(call("workspace__delete", {"path": "proj", "recursive": True})), say("ok")])
    asked = ConversationSession(layout.executor, model).send_sync("t", "delete proj")
    assert "4 files" in asked.final and "1009 bytes" in asked.final, asked.final


def test_a_question_about_the_home_says_it_will_be_refused(layout: Layout) -> None:
    model = ScriptedModel(
        [calls(call("workspace__delete", {"path": ".config", "recursive": True})), say("ok")]
    )
    asked = ConversationSession(layout.executor, model).send_sync("t", "delete .config")
    assert asked.status == "needs_confirmation"
    assert "tether home" in asked.final, asked.final


def test_documents_are_never_saved_into_the_home(layout: Layout) -> None:
    from tether.toolkits.documents.specs import registry as documents

    before = layout.home_state()
    executor = Executor(documents, home=layout.home, settings=FAST)
    try:
        for save_to in (".config/tether/settings", ".config/tether/keys/new", ".config/tether/tether"):
            params = {
                "title": "x",
                "content": "## A\n- x",
                "formats": ["md"],
                "save_to": save_to,
                "overwrite": True,
            }
            consent = executor.confirm("documents.generate", params, caller="agent", source="test:person")
            result = executor.execute_sync("documents.generate", params, caller="agent", confirmation=consent)
            assert result.status is TaskStatus.FAILED, (save_to, result)
            assert "tether home" in result.message, result.message
    finally:
        executor.close()
    assert not list(layout.home.glob("**/*.md"))
    assert_home_intact(layout, before)


WRITER = """
[[shell.commands]]
name = "put"
program = {python!r}
args = ["-c", "import sys; open(sys.argv[1], 'w').write('planted')", "{{name}}"]
params = {{ name = '[\\w./-]{{1,100}}' }}
"""


def test_a_shell_command_never_writes_into_the_home(layout: Layout) -> None:
    import sys

    from tether.toolkits.shell.specs import registry as shell

    with (layout.home / "settings.toml").open("a", encoding="utf-8") as settings:
        settings.write(WRITER.format(python=sys.executable))
    executor = Executor(shell, home=layout.home, settings=FAST)
    try:
        params = {"command": "put", "args": {"name": ".config/tether/keys/planted.key"}}
        consent = executor.confirm("shell.run", params, caller="agent", source="test:person")
        result = executor.execute_sync("shell.run", params, caller="agent", confirmation=consent)
    finally:
        executor.close()
    assert not (layout.home / "keys" / "planted.key").exists(), result
    assert result.status is not TaskStatus.COMPLETED
