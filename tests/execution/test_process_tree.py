"""The kill step reaches a tree that moves while it is killed: descendants are stopped, then killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.figures import count
from tests.support.helpers import exited, wait_for
from tether.execution import process

# argv: tag, ready file. A "worker" with many descendants in sessions of their own, read (and killed)
# before the last one, which waits for the worker to die and then starts a successor: the kill of the
# others gives it the milliseconds it needs, as a busy tree would.
WORKER = r"""
import os, subprocess, sys, time
tag, ready = sys.argv[1], sys.argv[2]
me = os.getpid()
for _ in range(100):
    subprocess.Popen([tag, "60"], executable="/bin/sleep", start_new_session=True)
if os.fork() == 0:
    os.setsid()
    with open(ready, "w") as f:
        f.write(str(os.getpid()))
    while os.getppid() == me:
        pass
    if os.fork() == 0:
        os.setsid()
        os.execv("/bin/sleep", [tag, "60"])
    time.sleep(60)
time.sleep(60)
"""


def tagged(tag: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if tag.encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and not exited(int(entry)):
                    found.append(int(entry))
    return found


# Before descendants were stopped first, one attempt let the successor escape 8 times in 10.
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/bin/sleep and /proc")
@pytest.mark.parametrize("attempt", range(3))
def test_a_descendant_that_forks_when_the_worker_dies_is_killed_too(tmp_path: Path, attempt: int) -> None:
    count("process escapes tried")
    tag = f"tether-test-{uuid.uuid4().hex}"
    ready = tmp_path / "ready"
    worker = subprocess.Popen([sys.executable, "-c", WORKER, tag, str(ready)], start_new_session=True)
    try:
        wait_for(ready.exists, what="the last descendant")
        wait_for(lambda: len(tagged(tag)) >= 100, what="the worker's descendants")
        ref = process.ref_of(worker.pid)
        assert ref is not None
        process.kill_tree(ref)
        assert worker.wait(timeout=30) == -signal.SIGKILL
        wait_for(lambda: not tagged(tag), what="every descendant to end (one escaped the kill)")
    finally:
        worker.kill()
        worker.wait()
        for pid in tagged(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
