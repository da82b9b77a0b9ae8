"""What the thin ``tether`` client, the CLI server and the commands that manage it share: the signals a
starting command holds, the server's socket for this user and interpreter, and who holds that socket.

Like ``client.py`` it imports only the standard library's C-level modules (the client imports it
before it hands a command over, and that must cost what starting Python costs). ``zygote.py`` serves
the socket; ``home_cli.py`` (``tether server status|stop``) and ``guard.py`` read from here.
"""

from __future__ import annotations

import _signal  # pyright: ignore[reportMissingImports] - the C half of signal, no stub
import _socket
import fcntl
import os
import sys
import time
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SERVER_ENV = "TETHER_CLI_SERVER"

SOCKET_PATH_LIMIT = 100  # sun_path holds 108 bytes on Linux, 104 on the BSDs

LAST_RESORT = "/tmp"  # after $XDG_RUNTIME_DIR and $TMPDIR

# What ends a command the way Ctrl-C does. From this module's first line until the command's own
# handlers are in place (``guard.run``), these are held, never acted on: a SIGTERM during start-up
# then ends the command like one that comes later (one JSON document under --json, exit 130).
HELD = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)
_PENDING: list[int] = []
# Signals this process was started with ignored (``nohup`` ignores SIGHUP): they stay ignored here and
# in the command, as for any Unix program. SIGINT is the exception: a command started by ``cmd &``
# still stops on Ctrl-C (``guard.run``).
IGNORED: list[int] = []


def hold(signum: int, frame: object) -> None:
    _PENDING.append(signum)


def hold_signals() -> None:
    """Hold the signals that end a command until it can act on them (see ``HELD``)."""
    for sig in HELD:
        if sig != _signal.SIGINT and _signal.getsignal(sig) == _signal.SIG_IGN:
            IGNORED.append(sig)
        else:
            _signal.signal(sig, hold)


def pending_signals() -> list[int]:
    """The signals held so far (and forgotten: each is acted on once)."""
    held = list(_PENDING)
    _PENDING.clear()
    return held


def identity() -> list[Any]:
    """What a server must share with this process to run its commands: interpreter, version, path."""
    from tether import __version__

    return [sys.executable, __version__, sys.path]


def server_socket() -> str | None:
    """The socket of the server for this user, interpreter and import path; None where none can be."""
    if os.environ.get(SERVER_ENV, "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    if not (hasattr(_socket, "AF_UNIX") and hasattr(_socket, "SCM_RIGHTS") and hasattr(os, "getuid")):
        return None
    executable, version, path_entries = identity()
    # Not marshal: its bytes depend on reference counts. The server checks the full identity too.
    key = zlib.crc32("\0".join([executable, version, *path_entries]).encode(errors="surrogatepass"))
    for root in (os.environ.get("XDG_RUNTIME_DIR"), os.environ.get("TMPDIR"), LAST_RESORT):
        if not root:
            continue
        path = os.path.join(root, f"tether-{os.getuid()}", f"cli-{key:08x}.sock")
        if len(os.fsencode(path)) <= SOCKET_PATH_LIMIT and _private_folder(os.path.dirname(path)):
            return path
    return None


def _private_folder(path: str) -> bool:
    """Whether ``path`` is (now) a folder only this user can enter: the only place for our socket."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        stat = os.stat(path)
    except OSError:
        return False
    return stat.st_uid == os.getuid() and not stat.st_mode & 0o077


def server_state(socket_path: str) -> tuple[int | None, str]:
    """Who holds ``socket_path``'s lock and in what state: ``(pid, "starting" | "serving")``, or
    ``(None, "off")`` when no server does."""
    lock = socket_path[: -len(".sock")] + ".lock" if socket_path.endswith(".sock") else socket_path + ".lock"
    try:
        handle = os.open(lock, os.O_RDONLY)
    except OSError:
        return None, "off"
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, _, state = os.read(handle, 64).decode(errors="replace").partition(" ")
            if pid.isdigit():
                return int(pid), state.strip() or "starting"
            return None, "starting"  # between taking the lock and writing to it
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None, "off"
    finally:
        os.close(handle)


def serving(socket_path: str) -> int | None:
    """The pid of the server that serves ``socket_path`` now, or None."""
    pid, state = server_state(socket_path)
    return pid if state == "serving" else None


def stop(socket_path: str, timeout: float = 10.0) -> int | None:
    """Ask the server to retire (it sees running commands to their end) and wait until it is gone.
    Returns the pid it had, or None when none was serving."""
    pid, _ = server_state(socket_path)
    if pid is None:
        return None
    _signal_quietly(pid, _signal.SIGTERM, group=False)
    deadline = time.monotonic() + timeout
    while server_state(socket_path)[0] == pid and time.monotonic() < deadline:
        time.sleep(0.02)
    if server_state(socket_path)[0] == pid:  # still busy with a command after the deadline: end it now
        _signal_quietly(pid, _signal.SIGKILL, group=True)
    return pid


def _signal_quietly(pid: int, signum: int, *, group: bool) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signum)
    except ProcessLookupError:
        pass  # gone already: what the caller wanted
