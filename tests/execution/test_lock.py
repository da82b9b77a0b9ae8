import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import ROOT
from tether.errors import LockBusy
from tether.execution import lock as lock_module
from tether.execution.lock import LockSet, ResourceLock, holder

HOLDER = """
import sys, time
from pathlib import Path
from tether.execution.lock import ResourceLock
lock = ResourceLock(Path(sys.argv[1]), "automation")
lock.acquire(execution_id="exec-in-other-process", task_id="demo.loop_farm")
print("held", flush=True)
sys.stdin.readline()
"""


def holder_process(home: Path) -> subprocess.Popen[str]:
    """Another process that holds the automation lock until its stdin closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_lock_excludes_another_process_and_names_the_holder(tmp_path: Path) -> None:
    with holder_process(tmp_path) as holder:
        contender = ResourceLock(tmp_path, "automation")
        with pytest.raises(LockBusy) as info:
            contender.acquire(execution_id="me", task_id="demo.daily_training")
        assert info.value.data["blocked_by"] == "exec-in-other-process"
        assert info.value.data["holder"]["pid"] == holder.pid
        assert "exec-in-other-process" in info.value.message
        assert holder_of(tmp_path) == "exec-in-other-process"
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    # The OS released it with the process; the next holder replaces the stale owner record.
    lock = ResourceLock(tmp_path, "automation")
    lock.acquire(execution_id="me", task_id="t")
    assert lock.owner()["execution_id"] == "me"
    lock.release()
    assert holder_of(tmp_path) is None and lock.owner() == {}


def holder_of(home: Path) -> str | None:
    found = holder(home, ["automation"])
    return None if found is None else found[1]["execution_id"]


def test_a_killed_holder_releases_the_lock_and_its_stale_record_names_no_one(tmp_path: Path) -> None:
    with holder_process(tmp_path) as holder_proc:
        assert holder_of(tmp_path) == "exec-in-other-process"
        holder_proc.kill()
        holder_proc.wait(timeout=30)
    # The owner file is still there, but the process it names is gone: it is not believed.
    assert ResourceLock(tmp_path, "automation").owner()["execution_id"] == "exec-in-other-process"
    assert holder_of(tmp_path) is None
    lock = ResourceLock(tmp_path, "automation")
    lock.acquire(execution_id="next", task_id="t")
    lock.release()


def test_two_homes_never_share_a_lock(tmp_path: Path) -> None:
    first = ResourceLock(tmp_path / "a", "automation")
    first.acquire(execution_id="a", task_id="t")
    second = ResourceLock(tmp_path / "b", "automation")
    second.acquire(execution_id="b", task_id="t")
    first.release()
    second.release()


def test_lock_set_is_all_or_nothing(tmp_path: Path) -> None:
    busy = ResourceLock(tmp_path, "window")
    busy.acquire(execution_id="x", task_id="t")
    locks = LockSet(tmp_path, ["window", "automation"])
    with pytest.raises(LockBusy):
        locks.acquire(execution_id="y", task_id="t")
    # "automation" sorts first and was taken; it must have been given back.
    free = ResourceLock(tmp_path, "automation")
    free.acquire(execution_id="z", task_id="t")
    free.release()
    busy.release()


BARE_HOLDER = """
import fcntl, os, sys, time
from pathlib import Path
path = Path(sys.argv[1]) / "locks" / "automation.lock"
path.parent.mkdir(parents=True, exist_ok=True)
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_contender_never_names_an_unknown_holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal once read 'in use by execution unknown (?)': the holder was between taking the lock and
    writing its record, or between removing its record and letting go."""
    # A holder that lets go within the contender's settling time: the contender gets the lock. (The time
    # is stretched here: a loaded machine may wake the holder late, and that is not what this checks.)
    monkeypatch.setattr(lock_module, "OWNER_SETTLE_S", 60.0)
    quick = subprocess.Popen(
        [sys.executable, "-c", BARE_HOLDER, str(tmp_path), "0.2"], stdout=subprocess.PIPE, text=True
    )
    assert quick.stdout is not None and quick.stdout.readline().strip() == "held"
    lock = ResourceLock(tmp_path, "automation")
    lock.acquire(execution_id="e2", task_id="t.two")
    lock.release()
    quick.communicate(timeout=30)  # reaped, its pipe closed
    monkeypatch.undo()
    # A holder that never writes a record: the refusal says what is known, not "unknown (?)".
    slow = subprocess.Popen(
        [sys.executable, "-c", BARE_HOLDER, str(tmp_path), "30"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert slow.stdout is not None and slow.stdout.readline().strip() == "held"
        with pytest.raises(LockBusy) as caught:
            ResourceLock(tmp_path, "automation").acquire(execution_id="e3", task_id="t.three")
        assert "unknown" not in caught.value.message and "?" not in caught.value.message, caught.value.message
        assert "automation" in caught.value.message
    finally:
        slow.kill()
        slow.communicate(timeout=30)
