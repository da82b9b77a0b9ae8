"""The shell tasks through a real executor: real commands, refusals, live lines and stops."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.helpers import exited, wait_for
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths
from tether.tasks.result import TaskResult, TaskStatus
from tether.toolkits.shell.specs import registry

STREAM = (
    "import os, sys, time\n"
    "print('pid', os.getpid(), flush=True)\n"
    "i = 0\n"
    "while True:\n"
    "    i += 1\n"
    "    print(f'第 {{i}} 行 line {{i}}', flush=True)\n"
    "    time.sleep(0.05)\n"
)

SETTINGS = f"""
[[shell.commands]]
name = "echo"
program = "/bin/echo"
args = ["{{text}}"]
params = {{ text = '[\\w ,.!?，。-]{{1,200}}' }}
description = "Print some text."

[[shell.commands]]
name = "ls"
program = "ls"
args = ["-1", "{{dir}}"]
params = {{ dir = '[\\w./-]{{1,100}}' }}

[[shell.commands]]
name = "env"
program = {sys.executable!r}
args = ["-c", "import os; print(sorted(os.environ))"]
env = ["PATH"]

[[shell.commands]]
name = "fail"
program = {sys.executable!r}
args = ["-c", "import sys; print('bad news'); sys.exit(3)"]

[[shell.commands]]
name = "hang"
program = {sys.executable!r}
args = ["-c", "import time; time.sleep(60)"]
timeout_s = 0.5

[[shell.commands]]
name = "wipe"
program = {sys.executable!r}
args = ["-c", "print('wiped')"]
danger = "destructive"

[[shell.commands]]
name = "stream"
program = {sys.executable!r}
args = ["-c", {STREAM!r}]
background = true
"""


@pytest.fixture
def shell(make_executor: Callable[..., Executor], home: Path) -> Executor:
    (home / "settings.toml").write_text(SETTINGS, encoding="utf-8")
    (home / "workspace" / "docs").mkdir(parents=True)
    (home / "workspace" / "docs" / "笔记.md").write_text("x")
    return make_executor(registry)


def run(
    executor: Executor, task: str, caller: str = "cli", confirm: bool = False, **params: object
) -> TaskResult:
    confirmation = executor.confirm(task, params, caller=caller, source="test:person") if confirm else None
    return executor.execute_sync(task, params, caller=caller, confirmation=confirmation)


def test_allow_listed_commands_run_with_their_output(shell: Executor) -> None:
    echo = run(shell, "shell.run", command="echo", args={"text": "你好, world"})
    assert echo.status is TaskStatus.COMPLETED, echo
    assert echo.data["output"] == "你好, world" and echo.data["exit_code"] == 0
    listed = run(shell, "shell.run", command="ls", args={"dir": "docs"})
    assert listed.status is TaskStatus.COMPLETED, listed
    assert listed.data["output"] == "笔记.md"


def test_only_the_named_environment_passes(shell: Executor) -> None:
    result = run(shell, "shell.run", command="env")
    names = set(json.loads(result.data["output"].replace("'", '"')))
    assert "PATH" in names and names <= {"PATH", "LC_CTYPE"}


def test_a_model_asks_the_person_first(shell: Executor) -> None:
    asked = run(shell, "shell.run", caller="agent", command="echo", args={"text": "hi"})
    assert asked.status is TaskStatus.REJECTED and asked.data["needs_confirmation"] is True
    assert asked.data["danger"] == "caution"
    confirmed = run(shell, "shell.run", caller="agent", confirm=True, command="echo", args={"text": "hi"})
    assert confirmed.status is TaskStatus.COMPLETED, confirmed


def test_a_destructive_command_needs_an_explicit_confirmation(shell: Executor) -> None:
    plain = run(shell, "shell.run", command="wipe")
    assert plain.status is TaskStatus.FAILED and "marked destructive" in plain.message
    unconfirmed = run(shell, "shell.run", command="wipe", destructive=True)
    assert unconfirmed.status is TaskStatus.REJECTED and unconfirmed.data["danger"] == "destructive"
    confirmed = run(shell, "shell.run", command="wipe", destructive=True, confirm=True)
    assert confirmed.status is TaskStatus.COMPLETED and confirmed.data["output"] == "wiped"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (
            {"command": "rm"},
            "'rm' is not an allow-listed command; allowed: echo, env, fail, hang, ls, stream, wipe",
        ),
        ({"command": "echo", "args": {"text": "hi; rm -rf ~"}}, "does not match the pattern"),
        ({"command": "echo", "args": {"text": "$(id)"}}, "does not match the pattern"),
        ({"command": "echo", "args": {"text": "a\nb"}}, "control character"),
        ({"command": "ls", "args": {"dir": "-la"}}, "may not start with '-'"),
        ({"command": "echo", "args": {}}, "missing: ['text']"),
        ({"command": "stream"}, "'stream' is a background command: use shell.start"),
    ],
)
def test_refusals_say_what_is_allowed(shell: Executor, params: dict[str, object], expected: str) -> None:
    result = shell.execute_sync("shell.run", params, caller="cli")
    assert result.status is TaskStatus.FAILED, result
    assert expected in result.message


def test_shapes_are_rejected_by_the_executor(shell: Executor) -> None:
    result = run(shell, "shell.run", command="echo hi; rm -rf /")
    assert result.status is TaskStatus.REJECTED and "command" in result.message
    result = run(shell, "shell.run", command="echo", args="hello")
    assert result.status is TaskStatus.REJECTED


def test_exit_codes_and_time_limits_fail_with_the_output(shell: Executor) -> None:
    failed = run(shell, "shell.run", command="fail")
    assert failed.status is TaskStatus.FAILED and failed.data["exit_code"] == 3
    assert "exited with code 3" in failed.message and failed.data["output"] == "bad news"
    hung = run(shell, "shell.run", command="hang")
    assert hung.status is TaskStatus.FAILED and "time limit of 0.5s" in hung.message


def test_list_describes_the_commands(shell: Executor) -> None:
    listed = run(shell, "shell.list", caller="agent")
    assert listed.status is TaskStatus.COMPLETED
    echo = next(c for c in listed.data["commands"] if c["name"] == "echo")
    assert echo["argv"] == ["echo", "{text}"] and echo["description"] == "Print some text."


def test_unavailable_without_commands(make_executor: Callable[..., Executor]) -> None:
    executor = make_executor(registry)
    result = executor.execute_sync("shell.run", {"command": "echo"}, caller="cli")
    assert result.status is TaskStatus.REJECTED and "no shell command is allow-listed" in result.message


def progress_lines(home: Path, execution_id: str) -> list[str]:
    path = ExecutionPaths.of(home, execution_id).events
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [event.get("message", "") for event in events if event.get("kind") == "progress"]


def test_a_background_command_streams_lines_and_stops_on_request(shell: Executor, home: Path) -> None:
    started = asyncio.run(shell.execute("shell.start", {"command": "stream"}, caller="cli", detach=True))
    assert started.status is TaskStatus.RUNNING, started
    eid = started.execution_id
    lines = wait_for(
        lambda: (found := progress_lines(home, eid)) and any("line 3" in line for line in found) and found,
        what="three live lines",
    )
    assert "第 1 行 line 1" in lines
    pid = int(next(line for line in lines if line.startswith("pid ")).split()[1])
    assert not exited(pid)
    busy = run(shell, "shell.start", command="stream")
    assert busy.status is TaskStatus.REJECTED and "in use" in busy.message
    stopped = asyncio.run(shell.control(eid, "stop", caller="cli"))
    assert stopped.status is TaskStatus.STOPPED, stopped
    wait_for(lambda: exited(pid), what="the command's process to end")
    log = ExecutionPaths.of(home, eid).log.read_text(encoding="utf-8")
    assert "progress ? 第 2 行 line 2" in log  # each streamed line is in the log once
