"""``tether`` start-up, next to ``python -c pass`` in the same run.

Through the CLI server (what every command after the first one gets) with the targets of issue 7, and
in its own process (``TETHER_CLI_SERVER=0``: the first command, or where no server may run) for the
record.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.paired import paired, row

ROUNDS = 15
COMMANDS = (
    ("tether --help", ("--help",), 4.0),
    ("tether tasks", ("tasks",), 4.0),
    ("tether task run <inline task>", ("task", "run", "b.inline"), 6.0),
    ("tether task run <process task>", ("task", "run", "b.sync"), 10.0),
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

    def run(args: tuple[str, ...], **extra: str) -> None:
        done = subprocess.run([tether, *args], env={**env, **extra}, capture_output=True)
        assert done.returncode == 0, done.stderr

    print("\ncommand start-up, end to end (the venv's python; paired with `python -c pass`)")
    run(("tasks",))  # the first command runs here and starts the server for the next ones
    _wait_until_serving(tether, env)
    try:
        for label, args, target in COMMANDS:
            pair = paired(lambda args=args: run(args), python, ROUNDS)
            row(f"{label}, served", pair, "python -c pass", target)
        for label, args, _ in COMMANDS:
            pair = paired(lambda args=args: run(args, TETHER_CLI_SERVER="0"), python, 5, warmup=1)
            row(f"{label}, own process", pair, "python -c pass")
    finally:
        subprocess.run([tether, "server", "stop"], env=env, capture_output=True)


def _wait_until_serving(tether: str, env: dict[str, str]) -> None:
    import json

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = subprocess.run([tether, "server", "status", "--json"], env=env, capture_output=True, text=True)
        if done.returncode == 0 and json.loads(done.stdout)["state"] == "serving":
            time.sleep(0.5)  # its first spare is warming up
            return
        time.sleep(0.05)
    raise RuntimeError("the CLI server did not start within 60 s")
