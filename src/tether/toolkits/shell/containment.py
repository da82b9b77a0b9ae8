"""Containment: every process a command starts ends with the command, however it detaches.

A command may start processes that leave its process group and session (``setsid``), whose parents
exit (a double fork), or that keep replacing themselves with a new pid; one of them may hold the
output pipe open. A ``killpg`` of the command's group misses all of those. A ``Tree`` holds them:

- ``cgroup``: a cgroup v2 of its own per command, made below the worker's cgroup; the command is
  moved into it before it executes, so everything it starts is born inside, and ``cgroup.kill``
  ends all of it at once, forks in flight included. Used where cgroup v2 is mounted and writable and
  offers ``cgroup.kill`` (Linux 5.14+).
- ``subreaper``: otherwise. The worker declares itself a child subreaper (``PR_SET_CHILD_SUBREAPER``):
  a process of the tree whose parent exits is re-parented to the worker instead of init, so the
  whole tree stays below the worker, where it is read from /proc and killed round after round until
  nothing is left (a process killed while it forks leaves its child to the worker: the next round).
- ``group``: where neither exists (not Linux), the command's process group, as before.

The worker is a subreaper in ``cgroup`` mode too: the job manager's last stop step kills the worker
and the descendants it reads from /proc, and a subreaper keeps detached processes among them; a
process that moves itself out of the cgroup (root may) is still found below the worker. The worker
reaps the orphans it adopts. Cgroups left by a worker that was killed are ended and removed by the
next command that makes one.

A process is its pid *and* start time, and a signal goes through a pidfd opened and then checked
against both, so a pid the OS reused meanwhile is never signalled. A zombie counts as ended (PID 1
of some machines never reaps orphans).

``TETHER_CONTAINMENT=subreaper`` forces the fallback (the tests force it; so may a person whose
cgroups misbehave); unset or ``auto`` takes the strongest available.

May import: the standard library only (a leaf, usable below execution).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODE_ENV = "TETHER_CONTAINMENT"
KILL_WAIT_S = 5.0  # how long the kill rounds may take before the survivors are reported
POLL_S = 0.01
_PR_SET_CHILD_SUBREAPER = 36
_CGROUP_NAME = re.compile(r"^tether-(\d+)-(\d+)-\d+$")
_linux = sys.platform.startswith("linux") and os.path.isdir("/proc")


@dataclass(frozen=True, slots=True)
class Proc:
    """A process: its pid and its start time (clock ticks after boot, as /proc gives it)."""

    pid: int
    start: int


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of ``pid``, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    return fields[0], int(fields[1]), int(fields[19])


def identity(pid: int) -> Proc | None:
    """The live process ``pid`` is now, or None when it has ended (a zombie has)."""
    stat = _stat(pid)
    if stat is None or stat[0] in "ZX":
        return None
    return Proc(pid, stat[2])


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (an orphan is handed to some thread of its reaper)."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return found


def send(proc: Proc, sig: int) -> bool:
    """Signal ``proc`` if that very process still runs; True if sent."""
    try:
        fd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):  # no pidfds (Linux < 5.3): checked, then signalled by number
        if identity(proc.pid) != proc:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, sig)
            return True
        return False
    try:
        # The descriptor holds the process it was opened for: checked now, that one is signalled.
        if identity(proc.pid) != proc:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        os.close(fd)


def _become_subreaper() -> bool:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


# -- cgroup v2 ------------------------------------------------------------------------------------


def _own_cgroup() -> Path | None:
    """The folder of the cgroup v2 this process is in, or None when cgroup v2 is not mounted."""
    try:
        own = next(
            line[3:].strip()
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line[:3] == "0::"
        )
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except (OSError, StopIteration):
        return None
    for line in mounts:
        fields = line.split()
        if " - cgroup2 " not in line or len(fields) < 5:
            continue
        root, point = fields[3], fields[4]
        # The mount shows the hierarchy from ``root`` down (a cgroup namespace shows its own part).
        if own == root or own.startswith(root.rstrip("/") + "/"):
            relative = own[len(root) :].lstrip("/")
            folder = Path(point.replace("\\040", " "), relative)
            if folder.is_dir():
                return folder
    return None


def cgroup_problem() -> str | None:
    """Why no per-command cgroup can be made here, or None when one can."""
    if not _linux:
        return "not Linux"
    own = _own_cgroup()
    if own is None:
        return "cgroup v2 is not mounted"
    me = identity(os.getpid())
    if me is None:
        return "this process cannot read its own identity in /proc"
    probe = own / f"tether-{me.pid}-{me.start}-0"  # named like the others: a sweep removes a leftover
    try:
        probe.mkdir()
    except FileExistsError:
        pass
    except OSError as exc:
        return f"no cgroup can be made in {own}: {exc.strerror or exc}"
    try:
        # The root cgroup has no cgroup.kill of its own: a child shows whether the kernel offers it.
        if not (probe / "cgroup.kill").exists():
            return "this kernel's cgroups have no cgroup.kill (Linux 5.14+)"
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    return None


def _populated(cgroup: Path) -> bool:
    try:
        return "populated 1" in (cgroup / "cgroup.events").read_text()
    except OSError:
        return False


def _kill_cgroup(cgroup: Path) -> None:
    with contextlib.suppress(OSError):
        (cgroup / "cgroup.kill").write_text("1")


def _remove_cgroup(cgroup: Path, within_s: float = 0.5) -> bool:
    """rmdir, once the processes just killed are gone (their exit is not instant)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            cgroup.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


def _sweep(parent: Path) -> None:
    """End and remove the cgroups of workers that are gone (killed before they could)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            found = _CGROUP_NAME.match(entry.name)
            if found is None or not entry.is_dir(follow_symlinks=False):
                continue
            if identity(int(found.group(1))) == Proc(int(found.group(1)), int(found.group(2))):
                continue  # its worker lives and ends it itself
            cgroup = Path(entry.path)
            if _populated(cgroup):
                _kill_cgroup(cgroup)
            _remove_cgroup(cgroup, within_s=0.1)


_made = 0


def _make_cgroup() -> tuple[Path | None, str | None]:
    """A new cgroup for one command, or (None, why not)."""
    global _made
    problem = cgroup_problem()
    own = _own_cgroup()
    me = identity(os.getpid())
    if problem is not None or own is None or me is None:
        return None, problem or "cgroup v2 is not mounted"
    _sweep(own)
    _made += 1
    cgroup = own / f"tether-{me.pid}-{me.start}-{_made}"
    try:
        cgroup.mkdir()
    except OSError as exc:
        return None, f"no cgroup can be made in {own}: {exc.strerror or exc}"
    return cgroup, None


# -- the tree of one command ----------------------------------------------------------------------


class Tree:
    """The processes of one command. ``spawn`` starts it; ``end`` ends every process it started."""

    def __init__(
        self, *, mode: str, cgroup: Path | None, foreign: frozenset[int], why: str | None = None
    ) -> None:
        self.mode = mode
        self.cgroup = cgroup
        self.why = why  # why the containment is not the strongest (no cgroup), for the log
        self._foreign = foreign  # children this process had before: not the command's
        self.main: subprocess.Popen[bytes] | None = None

    @classmethod
    def prepare(cls) -> Tree:
        """Make ready to contain one command: the strongest containment this machine offers."""
        wanted = os.environ.get(MODE_ENV, "auto").strip().lower()
        if not _linux:
            return cls(mode="group", cgroup=None, foreign=frozenset(), why="not Linux")
        if not _become_subreaper():
            return cls(mode="group", cgroup=None, foreign=frozenset(), why="prctl refused a subreaper")
        foreign = frozenset(_children(os.getpid()))
        if wanted == "subreaper":
            cgroup, why = None, f"{MODE_ENV}={wanted}"
        else:
            cgroup, why = _make_cgroup()
        mode = "subreaper" if cgroup is None else "cgroup"
        return cls(mode=mode, cgroup=cgroup, foreign=foreign, why=why)

    def spawn(
        self, argv: list[str], *, cwd: str | os.PathLike[str] | int, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` (no shell) in its own session inside the tree: stdin closed, stdout and stderr
        on one pipe, no other descriptor inherited. ``cwd`` may be an open folder's descriptor (Linux):
        the command then starts in that very folder, wherever its path leads by now."""
        if isinstance(cwd, int):
            # The child changes into it before it closes the descriptors it does not keep: the path
            # names the descriptor the child inherited, which /proc resolves to the folder itself.
            cwd = f"/proc/self/fd/{cwd}"

        def start(preexec: Callable[[], object] | None) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                argv,
                shell=False,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                close_fds=True,
                start_new_session=sys.platform != "win32",
                preexec_fn=preexec,
            )

        if self.cgroup is not None:
            procs = os.open(self.cgroup / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
            try:
                # In the child between fork and exec, so nothing the command runs is ever outside.
                # (Only an os.write there: it takes no lock that another thread could hold.)
                self.main = start(lambda: os.write(procs, b"0"))
                return self.main
            except subprocess.SubprocessError:  # the cgroup refused the move: fall back
                self.release()
                self.mode, self.why = "subreaper", "the cgroup refused the command"
            finally:
                os.close(procs)
        self.main = start(None)
        return self.main

    def members(self) -> list[Proc]:
        """Every live process of the tree now."""
        found: dict[int, Proc] = {}
        if self.cgroup is not None:
            for folder, _, _ in os.walk(self.cgroup):
                with contextlib.suppress(OSError, ValueError):
                    for pid in map(int, Path(folder, "cgroup.procs").read_text().split()):
                        proc = identity(pid)
                        if proc is not None:
                            found[pid] = proc
        if self.mode in ("cgroup", "subreaper"):
            me = os.getpid()
            queue = [child for child in _children(me) if child not in self._foreign]
            seen = set(queue)
            while queue:
                pid = queue.pop()
                proc = identity(pid)
                if proc is not None:
                    found[pid] = proc
                for child in _children(pid):
                    if child not in seen:
                        seen.add(child)
                        queue.append(child)
        elif self.main is not None and self.main.poll() is None:
            proc = identity(self.main.pid) if _linux else Proc(self.main.pid, 0)
            if proc is not None:
                found[proc.pid] = proc
        return list(found.values())

    def reap(self) -> None:
        """Collect the orphans this process adopted that have exited (the command's own exit status
        is left to ``Popen``)."""
        if self.main is not None:
            self.main.poll()
        if self.mode not in ("cgroup", "subreaper"):
            return
        main = self.main.pid if self.main is not None else None
        for child in _children(os.getpid()):
            if child in self._foreign or child == main:
                continue
            stat = _stat(child)
            if stat is not None and stat[0] in "ZX":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(child, os.WNOHANG)

    def _signal_all(self, sig: int) -> int:
        if self.mode == "group":
            if self.main is None:
                return 0
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.main.pid, sig)  # leftovers of a group whose leader has exited too
                return 1
            return 0
        if sig == signal.SIGKILL and self.cgroup is not None:
            _kill_cgroup(self.cgroup)
        return sum(send(proc, sig) for proc in self.members())

    def end(self, grace_s: float) -> list[int]:
        """End every process of the tree: SIGTERM, then SIGKILL after ``grace_s`` until none is left.
        Returns the pids still alive after ``KILL_WAIT_S`` of killing (a process stuck in the kernel).

        A ``KeyboardInterrupt`` (the job manager's next stop step, arriving meanwhile) skips the rest
        of the grace, never the kill; it is raised again once the tree has ended."""
        interrupted: BaseException | None = None
        try:
            if self._alive():
                self._signal_all(signal.SIGTERM)
                deadline = time.monotonic() + grace_s
                while self._alive() and time.monotonic() < deadline:
                    time.sleep(POLL_S)
        except KeyboardInterrupt as exc:
            interrupted = exc
        left: list[int] = []
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            try:
                self._signal_all(signal.SIGKILL)
                if not self._alive():
                    break
                if time.monotonic() >= deadline:
                    left = [proc.pid for proc in self.members()]
                    break
                time.sleep(POLL_S)
            except KeyboardInterrupt as exc:
                interrupted = interrupted or exc
        if self.main is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.main.wait(POLL_S if left else KILL_WAIT_S)
        self.release()
        if interrupted is not None:
            raise interrupted
        return left

    def _alive(self) -> bool:
        self.reap()
        if self.mode == "group":
            return self.main is not None and self.main.poll() is None
        return bool(self.members())

    def release(self) -> None:
        """Remove the cgroup (once empty; a cgroup still held is left for the next sweep)."""
        if self.cgroup is not None and not _populated(self.cgroup):
            if _remove_cgroup(self.cgroup):
                self.cgroup = None
