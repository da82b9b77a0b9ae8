import os
import subprocess
import sys

import pytest

from tether.execution import process
from tether.execution.process import ProcessRef


def test_identity_includes_the_start_time() -> None:
    me = process.current()
    assert me.pid == os.getpid() and process.is_alive(me)
    assert not process.is_alive(ProcessRef(pid=me.pid, create_time=me.create_time - 100))


def test_a_zombie_counts_as_exited() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ref = None
    while ref is None and child.poll() is None:
        ref = process.ref_of(child.pid)
    # Not reaped yet: wait for it to become a zombie, without waitpid.
    import time

    deadline = time.monotonic() + 30
    while process.ref_of(child.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert process.ref_of(child.pid) is None  # a zombie (or gone) is not alive
    if ref is not None:
        assert not process.is_alive(ref)
    child.wait()


def test_signals_are_never_sent_to_a_reused_pid() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        real = process.ref_of(child.pid)
        assert real is not None
        impostor = ProcessRef(pid=child.pid, create_time=real.create_time - 50)
        assert not process.interrupt(impostor)
        process.kill_tree(impostor)
        assert child.poll() is None
        process.kill_tree(real)
        assert child.wait(timeout=30) == -9
    finally:
        child.kill()


def test_kill_tree_reaches_descendants_that_left_the_group(tmp_path) -> None:
    """A worker's grandchild that moved to its own session is out of reach of killpg: the kill step
    finds it in the tree (read before the kill) and kills it too."""
    from tests.support.helpers import exited, wait_for

    marker = tmp_path / "escaped.pid"
    script = f"""
import os, sys, time
if os.fork() == 0:
    os.setsid()  # leave the worker's group and session
    if os.fork() == 0:
        open({str(marker)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
        os._exit(0)
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""
    worker = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        escaped = int(wait_for(lambda: marker.exists() and marker.read_text(), what="the escaped grandchild"))
        ref = process.ref_of(worker.pid)
        assert ref is not None
        tree = {d.pid for d in process.descendants(worker.pid)}
        assert escaped in tree and len(tree) == 2
        assert os.getpgid(escaped) != worker.pid
        process.kill_tree(ref)
        assert worker.wait(timeout=30) == -9
        wait_for(lambda: exited(escaped), what="the escaped grandchild to be killed")
        # Killed is not yet gone: each (stopped first, then killed) still has to be scheduled to exit.
        wait_for(lambda: all(exited(pid) for pid in tree), what="the whole tree to end")
    finally:
        worker.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux reads identity from /proc")
def test_an_identity_does_not_move_when_the_wall_clock_is_stepped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The boot time in wall-clock terms moves with every clock step (NTP, a resumed VM): a fork server
    that read it before a step and an executor that read it after disagreed about every identity, and
    each worker was stopped as if its starter had exited. A start time is now the kernel's count since
    boot; one recorded in wall-clock seconds (an older tether) is still recognised."""
    me = process.current()
    booted = process._linux_boot_time()
    monkeypatch.setattr(process, "_linux_boot_time", lambda: booted + 3600.0)  # the clock stepped an hour
    assert process.current() == me and process.is_alive(me)
    monkeypatch.setattr(process, "_linux_boot_time", lambda: booted)
    recorded = ProcessRef(pid=me.pid, create_time=booted + me.create_time)  # as an older tether wrote it
    assert process.is_alive(recorded)
    assert not process.is_alive(ProcessRef(pid=me.pid, create_time=recorded.create_time - 100))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux reads identity from /proc")
def test_two_processes_agree_on_an_identity_across_a_clock_step() -> None:
    """A process that learned the boot time after the wall clock was stepped (here: an hour) names this
    process as this process does."""
    script = (
        "import sys\n"
        "from tether.execution import process\n"
        "process._BOOT_TIME = getattr(process, '_BOOT_TIME', 0.0) + 3600.0\n"  # what an older tether cached
        "booted = process._linux_boot_time()\n"
        "process._linux_boot_time = lambda: booted + 3600.0\n"
        "print(process.ref_of(int(sys.argv[1])).create_time)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(os.getpid())], capture_output=True, text=True, check=True
    )
    seen = ProcessRef(pid=os.getpid(), create_time=float(done.stdout))
    assert process.is_alive(seen), (seen, process.current())
