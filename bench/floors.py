"""Same-mechanism floors: the least work that does what tether does, measured in the same run.

- ``ForkFloor``: a preloaded fork server (pydantic and the bench registry imported, like tether's) whose
  child publishes one file durably (tether's own ``write_json_atomic``) and exits; the parent sees the
  file appear. A warm ``execute()`` of a sync task does this plus every check and record.
- ``signal_floor``: how long a plain Python process takes to end after SIGINT (it raises
  KeyboardInterrupt) or SIGKILL, from the signal until it is seen gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = """
import os, sys
from pathlib import Path
import pydantic  # noqa: F401 - the same preload as tether's fork server
import bench.registry  # noqa: F401
from tether.execution.protocol import write_json_atomic
sys.stdout.write("ready\\n"); sys.stdout.flush()
children = []
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        os.setsid()
        write_json_atomic(Path(line.strip()), {"protocol": 2, "done": True})
        os._exit(0)
    children.append(pid)
    while children:
        done, _ = os.waitpid(-1, os.WNOHANG)
        if done == 0:
            break
        children.remove(done)
    sys.stdout.write(f"ok {pid}\\n"); sys.stdout.flush()
"""

POLL_S = 0.0002


class ForkFloor:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tether-floor-"))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"
        self.n = 0

    def run(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.n += 1
        target = self.dir / f"r{self.n}.json"
        self.proc.stdin.write(f"{target}\n")
        self.proc.stdin.flush()
        self.proc.stdout.readline()
        while not target.exists():
            time.sleep(POLL_S)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


LOOPER = "import time\nwhile True: time.sleep(0.005)\n"


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in "ZX"


def signal_floor(sig: int) -> float:
    """Seconds from ``sig`` to a plain looping Python process being gone (seen by polling /proc)."""
    proc = subprocess.Popen([sys.executable, "-c", LOOPER], start_new_session=True)
    time.sleep(0.15)  # let it reach its loop: a process still starting is not the floor
    start = time.perf_counter()
    os.killpg(proc.pid, sig)
    while not _gone(proc.pid):
        time.sleep(POLL_S)
    elapsed = time.perf_counter() - start
    proc.wait()
    return elapsed


INTERRUPT, KILL = signal.SIGINT, signal.SIGKILL
