"""Same-mechanism floors: the least work that does what tether does, measured in the same run.

``ForkFloor`` is a fork server preloaded like tether's (pydantic and the bench registry imported).
Its children are what tether's workers are, minus tether:

- ``publish()``: a child publishes one file durably (tether's own ``write_json_atomic``) and exits; the
  parent sees the file appear. A warm ``execute()`` of a sync task does this plus every check and record.
- ``signalled(sig)``: a child loops in ``time.sleep`` (SIGINT raises KeyboardInterrupt, which ends it);
  the time from ``killpg`` to the moment its pidfd says it exited. A stop step does this plus deciding,
  reading what the worker published and recording the outcome.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = """
import os, signal, sys, time
from pathlib import Path
import pydantic  # noqa: F401 - the same preload as tether's fork server
import bench.registry  # noqa: F401
from tether.execution.protocol import write_json_atomic
sys.stdout.write("ready\\n"); sys.stdout.flush()
for line in sys.stdin:
    verb, _, argument = line.strip().partition(" ")
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if verb == "publish":
            write_json_atomic(Path(argument), {"protocol": 2, "done": True})
            os._exit(0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            while True:
                time.sleep(0.005)
        except KeyboardInterrupt:
            os._exit(130)
    while True:
        try:
            done, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if done == 0:
            break
    sys.stdout.write(f"ok {pid}\\n"); sys.stdout.flush()
"""

POLL_S = 0.0002


class ForkFloor:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tether-floor-"))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"
        self.n = 0

    def _ask(self, line: str) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def publish(self) -> None:
        self.n += 1
        target = self.dir / f"r{self.n}.json"
        self._ask(f"publish {target}")
        while not target.exists():
            time.sleep(POLL_S)

    def signalled(self, sig: int) -> float:
        """Seconds from ``sig`` (to the child's group) to the child's exit, seen through a pidfd."""
        pid = self._ask("loop")
        time.sleep(0.05)  # let it reach its loop: a process still starting is not the floor
        fd = os.pidfd_open(pid)
        try:
            start = time.perf_counter()
            os.killpg(pid, sig)
            select.select([fd], [], [], 30)
            return time.perf_counter() - start
        finally:
            os.close(fd)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


INTERRUPT, KILL = signal.SIGINT, signal.SIGKILL
