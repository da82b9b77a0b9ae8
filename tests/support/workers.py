"""``tether worker`` processes of one home, for the tests of executors that cover for each other."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import ROOT

FLOWS = "tests.support.flowkit:flows"


def worker_env(home: Path) -> dict[str, str]:
    """The environment of a process of ``home`` (no CLI server; short stop graces)."""
    return {
        **os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0",
        "TETHER_STOP_GRACE_COOPERATIVE_S": "0.5", "TETHER_STOP_GRACE_INTERRUPT_S": "0.5",
    }  # fmt: skip


class Worker:
    """A ``tether worker`` and the executor id it announced."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "worker"],
            env=worker_env(home), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"executor (\S+) runs", line)
        assert found, line
        self.executor_id = found.group(1)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)  # the executor only: its workers live on (detached)
        self.proc.wait(timeout=30)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
