"""A value never reads or writes outside the command's folder: not through ``..`` and not through a
link in the folder, wherever the value stands in an argument; the folder itself is the one checked."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.figures import count
from tether.errors import ConfigError
from tether.execution.executor import Executor
from tether.tasks.result import TaskResult, TaskStatus
from tether.toolkits.shell import containment
from tether.toolkits.shell.allowlist import load_commands
from tether.toolkits.shell.specs import registry

PATH = r"[\w./=-]{0,100}"
# reads the path an option holds: --file=PATH or -oPATH
FLAG = "import sys; a = sys.argv[1]; print(open(a.split('=', 1)[1] if '=' in a else a[2:]).read())"
SETTINGS = f"""
[[shell.commands]]
name = "cat"
program = "/bin/cat"
args = ["{{file}}"]
params = {{ file = '{PATH}' }}

[[shell.commands]]
name = "grep"
program = "/bin/grep"
args = ["-r", "-l", "{{pattern}}", "{{dir}}"]
params = {{ pattern = '[a-z]+', dir = '{PATH}' }}

[[shell.commands]]
name = "joined"
program = "/bin/cat"
args = ["{{dir}}/{{name}}"]
params = {{ dir = '{PATH}', name = '{PATH}' }}

[[shell.commands]]
name = "option"
program = {sys.executable!r}
args = ["-c", "import sys; print(open(sys.argv[1].split('=', 1)[1]).read())", "--file={{file}}"]
params = {{ file = '{PATH}' }}

[[shell.commands]]
name = "below"
program = "/bin/cat"
args = ["sub/{{name}}"]
params = {{ name = '{PATH}' }}

[[shell.commands]]
name = "flag"
program = {sys.executable!r}
args = ["-c", {json.dumps(FLAG)}, "{{flag}}"]
params = {{ flag = '{PATH}' }}
options = ["flag"]

[[shell.commands]]
name = "pair"
program = "/bin/ls"
args = ["{{a}}{{b}}"]
params = {{ a = '{PATH}', b = '{PATH}' }}
"""

# (command, args): each leads outside the folder through a link (or names a hard-linked file).
ESCAPES = [
    ("cat", {"file": "etclink/hostname"}),
    ("cat", {"file": "hostlink"}),
    ("cat", {"file": "dangling"}),
    ("cat", {"file": "sub/out/settings.toml"}),
    ("cat", {"file": "hard"}),
    ("cat", {"file": "inner/../etclink/hostname"}),  # (.. is refused on its own too)
    ("grep", {"pattern": "root", "dir": "etclink"}),
    ("grep", {"pattern": "root", "dir": "sub/out"}),
    ("joined", {"dir": "etclink", "name": "hostname"}),
    ("joined", {"dir": "", "name": "etc/hostname"}),  # "" + "/" + … makes an absolute path
    ("option", {"file": "etclink/hostname"}),
    ("below", {"name": "out/settings.toml"}),
    ("flag", {"flag": "--file=etclink/hostname"}),  # a path inside an option value
    ("flag", {"flag": "--file=/etc/hostname"}),
    ("flag", {"flag": "-o/etc/hostname"}),
    ("cat", {"file": "if=/etc/hostname"}),
    ("pair", {"a": ".", "b": "."}),  # two harmless values that make ".."
    ("pair", {"a": "etc", "b": "link"}),
]

ALLOWED = [
    ("cat", {"file": "notes.md"}, "notes"),
    ("cat", {"file": "inner/a.txt"}, "inside"),  # a link that stays inside the folder
    ("joined", {"dir": "sub", "name": "a.txt"}, "inside"),
    ("option", {"file": "sub/a.txt"}, "inside"),
    ("below", {"name": "a.txt"}, "inside"),
    ("flag", {"flag": "--file=sub/a.txt"}, "inside"),
    ("flag", {"flag": "-onotes.md"}, "notes"),
    ("grep", {"pattern": "inside", "dir": "."}, "sub/a.txt"),
]


@pytest.fixture
def folder(home: Path, tmp_path: Path) -> Path:
    (home / "settings.toml").write_text(SETTINGS, encoding="utf-8")
    workspace = home / "workspace"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "notes.md").write_text("notes")
    (workspace / "sub" / "a.txt").write_text("inside")
    os.symlink("/etc", workspace / "etclink")
    os.symlink("/etc/hostname", workspace / "hostlink")
    os.symlink("/etc/tether-no-such-file", workspace / "dangling")
    os.symlink("../..", workspace / "sub" / "out")  # the home, above the folder
    os.symlink("sub", workspace / "inner")
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    os.link(outside, workspace / "hard")
    return workspace


@pytest.fixture
def shell(make_executor: Callable[..., Executor], folder: Path) -> Executor:
    return make_executor(registry)


def run(shell: Executor, command: str, args: dict[str, str]) -> TaskResult:
    return shell.execute_sync("shell.run", {"command": command, "args": args}, caller="cli")


@pytest.mark.parametrize(
    ("command", "args"), ESCAPES, ids=[f"{c}:{'+'.join(a.values())}" for c, a in ESCAPES]
)
def test_a_value_that_leads_outside_the_folder_is_refused(
    shell: Executor, command: str, args: dict[str, str]
) -> None:
    count("hostile inputs tried")
    result = run(shell, command, args)
    assert result.status is TaskStatus.FAILED, result
    assert "exit_code" not in result.data, f"it ran: {result.data.get('output')!r}"
    assert "outside the command's folder" in result.message or "hard link" in result.message, result.message


@pytest.mark.parametrize(("command", "args", "expected"), ALLOWED)
def test_values_inside_the_folder_still_work(
    shell: Executor, command: str, args: dict[str, str], expected: str
) -> None:
    result = run(shell, command, args)
    assert result.status is TaskStatus.COMPLETED, result
    assert expected in result.data["output"]


def test_the_folder_itself_is_checked(home: Path, folder: Path) -> None:
    count("hostile inputs tried")
    for cwd in ("etclink", "sub/out"):
        (home / "settings.toml").write_text(
            f'[[shell.commands]]\nname = "ls"\nprogram = "/bin/ls"\ncwd = "{cwd}"\n', encoding="utf-8"
        )
        with pytest.raises(ConfigError, match=re.escape("outside the workspace")):
            load_commands(home)
    (home / "settings.toml").write_text(
        '[[shell.commands]]\nname = "ls"\nprogram = "/bin/ls"\ncwd = "inner"\n', encoding="utf-8"
    )
    assert load_commands(home)["ls"].cwd == (folder / "sub").resolve()


def test_a_command_runs_in_the_folder_that_was_checked_even_if_its_path_is_swapped(tmp_path: Path) -> None:
    """The folder is opened once and the command starts in that very folder (by descriptor): a link put
    at its path after the check does not move the command elsewhere."""
    count("hostile inputs tried")
    checked = tmp_path / "checked"
    checked.mkdir()
    fd = os.open(checked, os.O_RDONLY | os.O_DIRECTORY)
    try:
        checked.rename(tmp_path / "moved")
        os.symlink("/etc", checked)
        tree = containment.Tree(mode="group", cgroup=None, foreign=frozenset())
        child = tree.spawn([sys.executable, "-c", "import os; print(os.getcwd())"], cwd=fd, env={})
        out, _ = child.communicate(timeout=30)
        assert out.decode().strip() == str(tmp_path / "moved")
    finally:
        os.close(fd)
