"""``tether`` start-up, next to ``python -c pass`` in the same run.

Through the CLI server (what every command after the first one gets) and in its own process
(``TETHER_CLI_SERVER=0``: the first command, or where no server may run). The goals are in CPU: the
client's (a reaped child: ``getrusage``) plus the server's whole tree (psutil: the server, its spare and
the workers it forks, until it has gone quiet after the command), against the CPU of ``python -c pass``
(reaped likewise). A floor far above its idle cost means a
loaded machine: the row is printed but not judged (``goals.CLI_LOADED_FLOOR_MS``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import goals
from bench.paired import Cpu, Goal, paired, row

ROUNDS = 15
QUIET_S = 0.05  # psutil reads CPU in 10 ms ticks: five idle ticks in a row is quiet
SETTLE_S = 2.0
# Two commands and a callback, so Typer builds a group and Rich renders its help, as for tether.
BARE_TYPER = """
import typer
app = typer.Typer()
@app.callback()
def main(home: str = typer.Option(None, help="the home")) -> None:
    "A bare app."
@app.command()
def one(name: str) -> None:
    "One."
@app.command()
def two(count: int = 1) -> None:
    "Two."
app()
"""
COMMANDS: tuple[tuple[str, tuple[str, ...], Goal | None, Goal | None], ...] = (
    ("tether --help", ("--help",), goals.CLI_SERVED["help"], goals.CLI_OWN_HELP),
    ("tether tasks", ("tasks",), None, None),
    ("tether task run <inline task>", ("task", "run", "b.inline"), goals.CLI_SERVED["inline"], None),
    ("tether task run <process task>", ("task", "run", "b.sync"), goals.CLI_SERVED["process"], None),
)


def cli_startup(home: Path) -> None:
    tether = str(Path(sys.executable).with_name("tether"))
    runtime = tempfile.mkdtemp(prefix="tether-bench-run-")
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": runtime,
        "TETHER_HOME": str(home),
        "TETHER_REGISTRY": "bench.registry:registry",
    }

    def python() -> None:
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    def run(args: tuple[str, ...], **extra: str) -> float:
        start = time.perf_counter()
        done = subprocess.run([tether, *args], env={**env, **extra}, capture_output=True)
        elapsed = time.perf_counter() - start
        assert done.returncode == 0, done.stderr
        return elapsed

    def served(args: tuple[str, ...]) -> float:
        """The command's wall time; returns once the server has gone quiet again, so that the CPU it
        spends after the client has exited (forking and warming the next spare) counts for this command
        and not in the floor's window."""
        elapsed = run(args)
        _settle(server)
        return elapsed

    print("\ncommand start-up, end to end (the venv's python)")
    run(("tasks",))  # the first command runs here and starts the server for the next ones
    server = _wait_until_serving(tether, env)
    # Only the commands' own processes count: this process waits and polls, on neither side.
    floor = Cpu("python, reaped (getrusage)", children_only=True)
    tree = (
        Cpu("client, reaped (getrusage) + server tree (psutil)", roots=lambda: [server], children_only=True),
        floor,
    )
    alone = (Cpu("client, reaped (getrusage)", children_only=True), floor)
    try:
        for label, args, goal, _ in COMMANDS:
            pair = paired(lambda args=args: served(args), python, ROUNDS, cpu=tree)
            row(f"{label}, served", pair, "python -c pass", goal)
        for label, args, _, goal in COMMANDS:
            pair = paired(lambda args=args: run(args, TETHER_CLI_SERVER="0"), python, 5, warmup=1, cpu=alone)
            row(f"{label}, own process", pair, "python -c pass", goal)

        def bare_typer() -> None:
            subprocess.run([sys.executable, "-c", BARE_TYPER, "--help"], check=True, capture_output=True)

        pair = paired(bare_typer, python, 5, warmup=1, cpu=alone)
        row("a bare Typer app's --help, own process", pair, "python -c pass (for the record)")
    finally:
        subprocess.run([tether, "server", "stop"], env=env, capture_output=True)


def _settle(server: int) -> None:
    """Wait until the server's tree has used no CPU for ``QUIET_S`` (or ``SETTLE_S`` have passed)."""
    meter = Cpu("server tree", roots=lambda: [server], children_only=True)  # nothing is reaped meanwhile
    deadline = time.monotonic() + SETTLE_S
    last = meter.sample(before=False)
    while time.monotonic() < deadline:
        time.sleep(QUIET_S)
        now = meter.sample(before=False)
        if now == last:
            return
        last = now


def _wait_until_serving(tether: str, env: dict[str, str]) -> int:
    """The server's pid once it serves."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = subprocess.run([tether, "server", "status", "--json"], env=env, capture_output=True, text=True)
        if done.returncode == 0 and json.loads(done.stdout)["state"] == "serving":
            time.sleep(0.5)  # its first spare is warming up
            return int(json.loads(done.stdout)["pid"])
        time.sleep(0.05)
    raise RuntimeError("the CLI server did not start within 60 s")
