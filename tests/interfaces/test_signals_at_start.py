"""Signals around a command's start and an inherited ignored SIGHUP, with real processes.

``nohup tether task run …`` starts with SIGHUP ignored: it must stay ignored (in the thin client, and in
the command the CLI server forks for it), as for any Unix program. A SIGTERM that arrives while a command
is still starting (importing, handing itself to the server, becoming the server's child) ends it like one
that arrives later: one JSON document under ``--json``, exit 130 — never a bare -15, never 71.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interfaces.test_cli_server import TETHER, Served, _command_pid
from tests.support.figures import count
from tests.support.helpers import ROOT, wait_for


def _ignored(pid: int) -> int:
    """The process's mask of ignored signals (SigIgn in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigIgn")


def _ignores(pid: int, sig: signal.Signals) -> bool:
    return bool(_ignored(pid) >> (sig - 1) & 1)


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether the process has a handler for ``sig`` (or has ended: nothing left to wait for)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (sig - 1) & 1) or "State:\tZ" in status


OUTCOMES = {(130, "interrupted"), (1, "stopped"), (0, "completed")}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = Served(tmp_path_factory.mktemp("run"))
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("through", ["server", "own process"])
def test_an_inherited_ignored_sighup_stays_ignored(served: Served, home: Path, through: str) -> None:
    env = served.env(
        TETHER_HOME=str(home), **({"TETHER_CLI_SERVER": "0"} if through == "own process" else {})
    )
    proc = subprocess.Popen(
        [str(TETHER), "task", "run", "t.waits_for_go", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )  # fmt: skip
    try:
        wait_for((home / "waiting").exists, timeout=60, what="the task to start")
        command = _command_pid(home)
        assert _ignores(proc.pid, signal.SIGHUP)  # the client neither forwards it nor dies of it
        assert _ignores(command, signal.SIGHUP), through  # nor does the command, wherever it runs
        proc.send_signal(signal.SIGHUP)
        (home / "go").write_text("go")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, (out, err)
        assert json.loads(out)["status"] == "completed"
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("through", ["server", "own process"])
def test_a_sigterm_during_start_up_ends_in_one_json_document(
    served: Served, home: Path, through: str
) -> None:
    """The signal lands at every moment of the start: right after exec, during imports, while the client
    hands the command over, while the server's spare becomes the command."""
    env = served.env(
        TETHER_HOME=str(home), **({"TETHER_CLI_SERVER": "0"} if through == "own process" else {})
    )
    for delay_ms in (0, 1, 2, 4, 8, 15, 25, 40, 60, 90, 130, 200, 300):
        proc = subprocess.Popen(
            [str(TETHER), "task", "run", "t.quick", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
        )  # fmt: skip
        # Before its first line runs, the interpreter is not ours: from the moment the command can
        # catch SIGTERM, it must end cleanly wherever the signal lands.
        wait_for(lambda p=proc: _catches(p.pid, signal.SIGTERM), timeout=30, what="the command to start")
        time.sleep(delay_ms / 1000)  # a point in the start-up, not a wait for state
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        count("signals during start-up tried")
        assert b"Traceback" not in err, err
        # It ended before it began (130), stopped the task it had started (1), or had finished (0).
        document = json.loads(out)
        said = document["error"]["code"] if "error" in document else document["status"]
        assert (proc.returncode, said) in OUTCOMES, (delay_ms, proc.returncode, out, err)


# A command whose stdout's reconfigure sends itself SIGTERM first: the signal lands exactly where the
# command makes its streams replace what they cannot encode.
RECONFIGURE_HIT = """
import io, json, os, signal, sys
from tether.interfaces import cli

class Out(io.TextIOWrapper):
    def reconfigure(self, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        super().reconfigure(**kwargs)
        sys.stderr.write("reconfigured\\n")

sys.stdout = Out(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
cli.main(["tasks", "--json"])
"""


def test_a_signal_while_the_streams_are_set_up_waits_until_they_are(home: Path) -> None:
    """Found under load: a SIGTERM that landed inside ``reconfigure`` (its codec lookup runs Python code)
    left stdout without an encoder, and the JSON document about the stop failed with "not writable" and
    a traceback. The streams are set up with the stop signals blocked; the signal then ends the command
    like any other, in one JSON document."""
    done = subprocess.run(
        [sys.executable, "-c", RECONFIGURE_HIT],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0"},
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    assert "reconfigured" in done.stderr, done.stderr  # the stream was set up whole before the stop acted
    assert done.returncode == 130 and "error" in json.loads(done.stdout), (done.stdout, done.stderr)
