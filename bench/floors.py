"""Same-mechanism floors: the least work that does what tether does, measured in the same run.

``ForkFloor`` is a fork server preloaded like tether's (pydantic and the bench registry imported).
Its children are what tether's workers are, minus tether:

- ``publish()``: a child publishes one file durably (tether's own ``write_json_atomic``) and exits; the
  parent sees the file appear. A warm ``execute()`` of a sync task does this plus every check and record.
- ``signalled(sig)``: a child loops in ``time.sleep`` (SIGINT raises KeyboardInterrupt, which ends it);
  the time from ``killpg`` to the moment its pidfd says it exited. A stop step does this plus deciding,
  reading what the worker published and recording the outcome.

A looping child is its own process group. The server answers with its pid only after the child has
written to a pipe once it has called ``setsid()`` and set its SIGINT handler: signalling the group
before that failed with ProcessLookupError and left the child looping forever. Every looping child is
killed in ``finally`` if the signal did not end it, and ``close()`` kills any left.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
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
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.setsid()
        if verb == "publish":
            os.close(ready_w)
            write_json_atomic(Path(argument), {"protocol": 2, "done": True})
            os._exit(0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            # a group leader with its handler set: signal away (inside the try: it may come at once)
            os.write(ready_w, b"r"); os.close(ready_w)
            while True:
                time.sleep(0.005)
        except KeyboardInterrupt:
            os._exit(130)
    os.close(ready_w)
    os.read(ready_r, 1)  # b"r" once the child is set up; b"" (its end closed) for a publishing child
    os.close(ready_r)
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
EXIT_WAIT_S = 30.0  # a signalled child that has not exited by then is killed and the row fails


class ForkFloor:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tether-floor-"))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,  # close() can end the server and its children as one group
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"
        self.n = 0
        self.looping: set[int] = set()  # pidfds of looping children not yet seen to exit

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
        pid = self._ask("loop")  # answered once the child leads its own group and handles SIGINT
        fd = os.pidfd_open(pid)
        self.looping.add(fd)
        try:
            start = time.perf_counter()
            os.killpg(pid, sig)
            exited, _, _ = select.select([fd], [], [], EXIT_WAIT_S)
            elapsed = time.perf_counter() - start
            if not exited:
                raise RuntimeError(f"the floor's child {pid} did not exit within {EXIT_WAIT_S:g} s of {sig}")
            return elapsed
        finally:
            _kill(fd)
            self.looping.discard(fd)

    def close(self) -> None:
        for fd in list(self.looping):
            _kill(fd)
        self.looping.clear()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _kill(pidfd: int) -> None:
    """SIGKILL through the pidfd (never a recycled pid) unless the child has exited; the fork server
    reaps it. Closes the pidfd."""
    try:
        if not select.select([pidfd], [], [], 0)[0]:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)


INTERRUPT, KILL = signal.SIGINT, signal.SIGKILL
