"""No process tether starts holds a key, except the one command that was handed it.

A key in ``/proc/PID/environ`` (the environment a process was started with, which a fork inherits
whatever ``os.environ`` says later) or in a worker's ``os.environ`` is readable by every task. This
runs the realistic sequence with real processes — a CLI server started by a command that had a key,
jobs started through it with and without one, and the same without the server (the executor's fork
server, and a fresh interpreter per worker) — then reads every process's environment on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.interfaces.test_cli_server import Served
from tests.support.helpers import exited, wait_for

MARKERS = {
    "server": "sk-server-f0a1b2c3d4e5",
    "served": "sk-served-a9b8c7d6e5f4",
    "own": "sk-ownproc-1122334455",
    "fresh": "sk-fresh-5544332211aa",
}


def _holders(secret: str) -> list[tuple[int, str]]:
    """Every process whose starting environment holds ``secret``, with its command line."""
    found = []
    needle = secret.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes():
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(entry.name), cmdline))
    return found


def test_no_worker_or_server_holds_a_key_that_a_command_was_handed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("TETHER_API_KEY")]:
        monkeypatch.delenv(name)
    served = Served(tmp_path / "run")
    home = tmp_path / "home"
    jobs: list[str] = []

    def run(*args: str, **env: str) -> dict[str, object]:
        done = served.run(*args, "--json", timeout=60.0, TETHER_HOME=str(home), **env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def start_job(**env: str) -> None:
        result = run("task", "run", "t.hangs_free", "--detach", **env)
        assert result["status"] == "running", result
        jobs.append(str(result["execution_id"]))

    def worker_names(**env: str) -> list[str]:
        result = run("task", "run", "t.environment", **env)
        assert result["status"] == "completed", result
        return list(result["data"]["names"])  # type: ignore[index]

    try:
        # The server is started by a command that had a key (it is that command's, not the server's).
        served.run("tasks", "--json", TETHER_API_KEY=MARKERS["server"])
        wait_for(served.serving, timeout=60, what="the CLI server to serve")
        start_job()  # through the server, from a shell without a key
        start_job(TETHER_API_KEY_OPENAI=MARKERS["served"])  # through the server, with one
        start_job(TETHER_CLI_SERVER="0", TETHER_API_KEY=MARKERS["own"])  # its own process: the fork server
        start_job(TETHER_CLI_SERVER="0", TETHER_FORKSERVER="0", TETHER_API_KEY=MARKERS["fresh"])
        names = [
            worker_names(),
            worker_names(TETHER_API_KEY=MARKERS["served"]),
            worker_names(TETHER_CLI_SERVER="0", TETHER_API_KEY=MARKERS["own"]),
            worker_names(TETHER_CLI_SERVER="0", TETHER_FORKSERVER="0", TETHER_API_KEY=MARKERS["fresh"]),
        ]
        for listed in names:
            assert not [n for n in listed if n.startswith("TETHER_API_KEY")], listed
        for execution_id in jobs:  # the scan below looks at live workers, not at ended ones
            status = run("job", "status", execution_id)
            assert status["status"] == "running", status
            assert not exited(int(status["data"]["pid"]))  # type: ignore[index]
        held = {name: _holders(secret) for name, secret in MARKERS.items()}
        assert held == {name: [] for name in MARKERS}, held
    finally:
        for execution_id in jobs:
            served.run("job", "stop", execution_id, TETHER_HOME=str(home))
        pid = served.status()["pid"]
        served.run("server", "stop")
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def test_the_command_that_was_handed_a_key_keeps_it_in_memory_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command in its own process takes its key out of its environment at start (an in-process task
    reads neither ``os.environ`` nor ``/proc/self/environ``), and still uses it."""
    for name in [n for n in os.environ if n.startswith("TETHER_API_KEY")]:
        monkeypatch.delenv(name)
    served = Served(tmp_path / "run")
    home = tmp_path / "home"
    secret = "sk-handed-0f1e2d3c4b5a"
    proc = served.popen(
        "task",
        "run",
        "t.marks_and_waits",
        TETHER_HOME=str(home),
        TETHER_CLI_SERVER="0",
        TETHER_API_KEY=secret,
    )
    try:
        wait_for((home / "acted").exists, timeout=60, what="the task to start")
        assert not exited(proc.pid)
        assert _holders(secret) == []
        shown = served.run("auth", "show", "openai", "--json", TETHER_HOME=str(home), TETHER_API_KEY=secret)
        assert json.loads(shown.stdout)["source"] == "TETHER_API_KEY"
        assert secret not in shown.stdout.decode()
    finally:
        proc.kill()
        proc.communicate(timeout=30)


HANDS_ON = """
import json, os, subprocess, sys
from tether import credentials
credentials.adopt_environment()
assert "TETHER_API_KEY_DEEPSEEK" not in os.environ
keys = credentials.handing_pipe()
env = {**os.environ, credentials.KEYS_FD_ENV: str(keys)}
child = subprocess.run([sys.executable, "-c", sys.argv[1]], env=env, pass_fds=(keys,), capture_output=True,
                       text=True, check=True)
print(child.stdout, end="")
"""
RECEIVES = """
import json, os
from tether import credentials
credentials.adopt_environment()
with open("/proc/self/environ", "rb") as handle:
    block = handle.read()
print(json.dumps({"key": credentials.get_key("deepseek"), "in_block": b"sk-" in block,
                  "in_environ": [n for n in os.environ if n.startswith(("TETHER_API_KEY", "TETHER_KEYS"))]}))
"""


def test_a_key_handed_to_a_background_executor_never_sits_in_an_environment() -> None:
    """``tether goal --detach`` starts an executor that asks the model: it gets the command's key through a
    pipe it reads once, so the key is in neither of its environments, nor in anything it starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_API_KEY")}
    done = subprocess.run(
        [sys.executable, "-c", HANDS_ON, RECEIVES],
        env={**env, "TETHER_API_KEY_DEEPSEEK": "sk-deep-99887766"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"key": "sk-deep-99887766", "in_block": False, "in_environ": []}
