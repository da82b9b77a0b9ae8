"""Helpers shared by tests: polling with a deadline, running the CLI as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.config import Settings

ROOT = Path(__file__).resolve().parents[2]

# The `tether` command as a person runs it: handed to this test process's CLI server (a warm image that
# forks each command; ``interfaces/zygote.py``), which the conftest gives each test process of its own.
# TETHER_TEST_DIRECT_CLI=1 runs every command in a fresh interpreter instead.
_SCRIPT = Path(sys.executable).with_name("tether")
CLI = (
    [sys.executable, "-m", "tether.interfaces.cli"]
    if os.environ.get("TETHER_TEST_DIRECT_CLI") == "1" or not _SCRIPT.exists()
    else [str(_SCRIPT)]
)

# Graces long enough that a loaded 2-core machine never skips a stop step; a responsive worker ends early.
FAST = Settings(
    handshake_timeout_s=15.0,
    stop_grace_cooperative_s=2.0,
    stop_grace_interrupt_s=2.0,
    stop_grace_kill_s=3.0,
    parent_poll_s=0.05,
)


def wait_for(condition: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def tether_cli(
    *args: str, home: Path, timeout: float = 60.0, env: dict[str, str] | None = None, **more_env: str
) -> tuple[int, str, str]:
    proc = subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={
            **os.environ,
            "TETHER_HOME": str(home),
            "TETHER_STOP_GRACE_COOPERATIVE_S": "0.5",
            "TETHER_STOP_GRACE_INTERRUPT_S": "0.5",
            **(env or {}),
            **more_env,
        },
        cwd=ROOT,
    )
    return proc.returncode, proc.stdout, proc.stderr


def exited(pid: int) -> bool:
    """True once ``pid`` is gone or a zombie (PID 1 here never reaps orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, it was read
        return True
    return state in "ZX"
