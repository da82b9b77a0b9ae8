"""Process identity, the worker command line, and signals to whole process groups.

A process is identified by pid *and* start time, so a pid the OS reused is never signalled. A zombie
counts as exited: on machines whose PID 1 never reaps orphans, an exited orphan stays a zombie forever.
Every worker leads its own process group, so one ``killpg`` reaches every descendant that stayed in it.
On Linux identity is read from /proc (psutil costs ~50 ms to import, which a worker should not pay).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Start times from two readers of the same process agree to far better than this.
START_TIME_TOLERANCE_S = 0.05
# On Linux a start time is seconds since boot (the kernel's own count), never wall-clock seconds: the
# boot time in wall-clock terms moves whenever the clock is stepped (NTP, a resumed VM), and two processes
# that read it before and after a step disagreed about every identity (93 tests: each worker of a fork
# server started before a step was "stopped: the process that started it exited"). A recorded start time
# above this is wall-clock seconds, as an older tether recorded it: compared as such.
WALL_CLOCK_START = 1e8
WORKER_FLAG = "--tether-worker"
FORKSERVER_FLAG = "--tether-forkserver"

_PROC = Path("/proc")
_linux = sys.platform.startswith("linux") and _PROC.is_dir()


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessRef:
    pid: int
    create_time: float


def _linux_boot_time() -> float:
    for line in (_PROC / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if _linux else 100


def _linux_stat(pid: int) -> tuple[str, float] | None:
    """(state letter, start time) of ``pid``, or None when there is no such process."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19]) / _CLOCK_TICKS


def ref_of(pid: int) -> ProcessRef | None:
    """The identity of a live process, or None when it does not exist (or is a zombie)."""
    if _linux:
        stat = _linux_stat(pid)
        if stat is None or stat[0] in "ZX":
            return None
        return ProcessRef(pid=pid, create_time=stat[1])
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return ProcessRef(pid=pid, create_time=process.create_time())
    except psutil.Error:
        return None


def current() -> ProcessRef:
    ref = ref_of(os.getpid())
    assert ref is not None
    return ref


def _same_start(found: float, recorded: float) -> bool:
    if _linux and recorded > WALL_CLOCK_START:  # recorded by an older tether, in wall-clock seconds
        found += _linux_boot_time()
    return abs(found - recorded) < START_TIME_TOLERANCE_S


def is_alive(ref: ProcessRef) -> bool:
    """True while the very process ``ref`` names runs; False once it exited, turned zombie or was replaced."""
    found = ref_of(ref.pid)
    return found is not None and _same_start(found.create_time, ref.create_time)


def worker_command(exec_dir: Path) -> list[str]:
    """The command line that runs one worker, from a source checkout or a frozen (PyInstaller) app.

    A frozen app has no ``-m``: its own executable is re-entered with a flag, and its entry point must
    call ``tether.execution.frozen.dispatch_frozen()`` first thing.
    """
    if getattr(sys, "frozen", False):
        return [sys.executable, WORKER_FLAG, str(exec_dir)]
    return [sys.executable, "-m", "tether.execution.worker", str(exec_dir)]


def forkserver_command(registry_ref: str) -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, FORKSERVER_FLAG, registry_ref]
    return [sys.executable, "-m", "tether.execution.forkserver", registry_ref]


def signal_group(ref: ProcessRef, sig: int) -> bool:
    """Send ``sig`` to the process group ``ref`` leads, if that very process still lives. True if sent."""
    if not is_alive(ref):
        return False
    try:
        if sys.platform == "win32":
            os.kill(ref.pid, sig)
        else:
            os.killpg(ref.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def interrupt(ref: ProcessRef) -> bool:
    """The second stop step: SIGINT to the group on POSIX, CTRL_BREAK_EVENT on Windows."""
    sig = getattr(signal, "CTRL_BREAK_EVENT", None) if sys.platform == "win32" else signal.SIGINT
    return signal_group(ref, int(sig)) if sig is not None else False


def _reused(ref: ProcessRef) -> bool:
    found = ref_of(ref.pid)
    return found is not None and not _same_start(found.create_time, ref.create_time)


def kill_tree(ref: ProcessRef) -> None:
    """The last stop step: kill the worker's group, and any descendant that left the group.

    The group is killed even when its leader already exited: Linux never hands out a number that is
    still some group's id, so the group can only hold the worker's own descendants. The descendants
    outside it are stopped before anything is killed (see ``_stopped_descendants``).
    """
    escaped = _stopped_descendants(ref.pid) if is_alive(ref) else []
    if _reused(ref):
        _kill_each(escaped, signal.SIGKILL)  # stopped above as the worker's: never left stopped
        return
    if sys.platform == "win32":
        import psutil

        for pid in [*(d.pid for d in escaped), *([ref.pid] if is_alive(ref) else [])]:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        return
    try:
        os.killpg(ref.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _kill_each(escaped, signal.SIGKILL)


def _kill_each(refs: list[ProcessRef], sig: int) -> None:
    for child in refs:
        if is_alive(child):  # never a number the OS handed to someone else meanwhile
            try:
                os.kill(child.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


KILL_SETTLE_S = 2.0  # how long end_descendants waits for what it killed to be gone
FREEZE_ROUNDS = 100  # readings of the tree before the kill goes ahead with what it has


def _stopped_descendants(pid: int) -> list[ProcessRef]:
    """Every descendant of ``pid``, each stopped (SIGSTOP) as it is found, read again until a reading
    finds no new one.

    A single reading races the tree: a process that forks between the reading and its own kill (or
    that starts a successor when it sees the worker die) leaves a child nobody read, re-parented to
    init once its parent dies. A stopped process cannot fork, and a child born before its parent
    stopped is in the next reading (as is an orphan a subreaper worker adopted meanwhile)."""
    found: dict[ProcessRef, None] = {}
    for _ in range(FREEZE_ROUNDS):
        new = [d for d in descendants(pid) if d not in found]
        if not new:
            break
        found.update(dict.fromkeys(new))
        if sys.platform != "win32":
            _kill_each(new, signal.SIGSTOP)
    return list(found)


def end_descendants(pid: int) -> int:
    """Kill every descendant of ``pid`` (stopped first, so none forks past the kill); how many there
    were. A worker calls it on itself when its handler did not complete: what the handler started ends
    with it."""
    found = _stopped_descendants(pid)
    _kill_each(found, signal.SIGKILL)
    # A SIGKILL is delivered, not done, when kill() returns: the failure published next must find them
    # gone (a test saw one still alive under load). Zombies count as gone.
    deadline = time.monotonic() + KILL_SETTLE_S
    while any(is_alive(ref) for ref in found) and time.monotonic() < deadline:
        time.sleep(0.002)
    return len(found)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux): a descendant whose parent exits is re-parented to
    it, not to init, so a handler's double-forked, ``setsid`` grandchild stays in its tree, where the
    stop's kill step (and ``end_descendants``) reaches it. False where the OS offers no such thing."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


@functools.cache
def _prctl() -> Any:
    """libc's ``prctl``, looked up once per process (a server that forks workers looks it up before it
    forks, so no worker imports ctypes: that import was a third of a forked worker's start)."""
    if not _linux:
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def prepare_for_forks() -> None:
    """Load in a forking server what each forked worker would otherwise load for itself."""
    _prctl()


def _children_files() -> bool:
    """Whether this kernel lists each thread's children in /proc (CONFIG_PROC_CHILDREN)."""
    return _linux and Path(f"/proc/self/task/{os.getpid()}/children").exists()


_HAS_CHILDREN_FILES = _children_files()
TREE_IS_CHEAP = _HAS_CHILDREN_FILES  # reading a worker's tree takes microseconds, not a scan of all


def descendants(pid: int) -> list[ProcessRef]:
    """Every live descendant of ``pid``, parents before their children.

    On Linux this follows /proc/<pid>/task/<tid>/children down the tree (microseconds); a psutil walk
    reads every process on the machine (milliseconds, and spikes of hundreds on a busy one). Like any
    snapshot of a tree that may be forking, it can miss a child born while it is read: the group kill
    that comes with it catches those that stayed in the group."""
    if not _HAS_CHILDREN_FILES:
        import psutil

        try:
            found = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return []
        return [ref for ref in (ref_of(p.pid) for p in found) if ref is not None]
    result: list[ProcessRef] = []
    queue = [pid]
    seen = {pid}
    while queue:
        parent = queue.pop(0)
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as handle:
                    children = [int(c) for c in handle.read().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in seen:
                    seen.add(child)
                    queue.append(child)
                    ref = ref_of(child)
                    if ref is not None:
                        result.append(ref)
    return result
