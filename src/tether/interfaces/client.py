"""The ``tether`` command itself: hand the command to the CLI server, or run it here.

This module imports only the standard library, so starting it costs what starting Python costs. When a
CLI server (``zygote.py``) serves this user and interpreter, the command runs in a fresh child of that
preloaded server, on this process's own stdin, stdout and stderr; this process forwards the signals it
gets (Ctrl-C, SIGTERM, SIGHUP) and ends with the command's exit status. When none serves, the command
runs right here as it always did, and a server is started in the background for the next one — so a
single command never waits for a server it will not reuse.

``TETHER_CLI_SERVER=0`` runs every command here. ``tether chat`` and ``tether auth set`` always run here
(they talk with the person at the terminal), and so does ``tether server`` (status, stop).
"""

from __future__ import annotations

import _signal  # pyright: ignore[reportMissingImports] - the C half of signal, no stub
import _socket
import marshal
import os
import sys

from tether.interfaces.handoff import HELD, IGNORED, hold_signals, identity, pending_signals, server_socket

# Only what this module needs at start, and the C halves of signal and socket: their Python halves
# import enum, functools and collections, which would double the time this command takes before it
# hands over (as would json, typing, pathlib or subprocess). Messages to the server are marshal (a
# builtin; the server only talks to processes of its own user).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

WITH_VALUE = frozenset({"--home", "--registry"})  # global options that take a value
# Run here, never in the server: they talk with the person at the terminal, or manage the server.
LOCAL = (
    *(("chat",), ("auth", "set"), ("server",), ("worker",), ("serve",), ("events",), ("goal",)),
    *(("flow", "run"), ("flow", "resume")),
)
CONNECT_TIMEOUT_S = 2.0
LOG_LIMIT = 1024 * 1024
RETRY_AFTER_FAILURE_S = 30.0
_LIFELINE: list[int] = []
FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT)

BOOT = (
    "import sys\n"
    "sys.path[:] = sys.argv[2:]\n"
    "from tether.interfaces.zygote import main\n"
    "sys.exit(main(sys.argv[1], sys.path))\n"
)


def command_words(argv: list[str]) -> tuple[str, ...]:
    """The command and subcommand named by ``argv``, skipping global options."""
    words: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            words.append(arg)
            if len(words) == 2:
                break
    return tuple(words)


def run_here(argv: list[str]) -> NoReturn:
    from tether.interfaces.cli import main as cli_main

    cli_main(argv)
    raise SystemExit(0)  # cli_main exits itself; this is only for the type checker


def start_server(path: str) -> None:
    """Start a server in the background for the next command (this one does not wait for it)."""
    import subprocess

    log = path[: -len(".sock")] + ".log"
    try:
        written = os.stat(log)
    except OSError:
        big = False
    else:
        big = written.st_size > LOG_LIMIT
        if written.st_size and _now() - written.st_mtime < RETRY_AFTER_FAILURE_S:
            return  # a server failed a moment ago (see the log): do not start one per command
    try:  # the log holds what a server could not handle; it starts over once it grows large
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if big else 0), 0o600)
    except OSError:
        return
    from tether.execution.environment import server_env

    with os.fdopen(fd, "ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-c", BOOT, path, *sys.path],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            close_fds=True,
            start_new_session=True,
            # Not this command's environment: every process the server forks carries the server's
            # in /proc/PID/environ, and this command may have been handed a key. Commands get their
            # client's environment with each request.
            env=server_env(),
        )
    server.returncode = 0  # it lives on by design; nothing here waits for it


def ask_server(path: str, argv: list[str]) -> dict[str, Any] | None:
    """Run ``argv`` in the server; the outcome ({"exit"} or {"signal"}), or None if it cannot."""
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        request = {
            "run": argv,
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "umask": _umask(),
            "identity": identity(),
            "ignored": list(IGNORED),
        }
        try:
            conn.connect(path)
            _send_with_stdio(conn, _frame(request))
            conn.settimeout(None)
            first = _read(conn)
        except (OSError, ValueError, EOFError):
            return None
        if "pid" not in first:
            return None  # stale (it is retiring) or refused: run here
        child = int(first["pid"])
        for sig in FORWARDED:
            if sig not in IGNORED:
                _signal.signal(sig, lambda signum, frame: _forward(child, signum))
        for signum in pending_signals():  # what came while the command was being handed over
            _forward(child, signum)
        try:
            outcome = _read(conn)
        except (OSError, ValueError, EOFError):
            outcome = {}
        return outcome or {"lost": True}
    finally:
        conn.close()


def _send_with_stdio(conn: Any, frame: bytes) -> None:
    """Send ``frame`` with this process's stdin, stdout and stderr attached (SCM_RIGHTS), and the read
    end of a lifeline: a pipe whose write end only this process holds, so the command sees the pipe
    end the moment this process does, however it ends. (A closed stdin, stdout or stderr is sent as
    /dev/null, as a fresh process would find it reopened.)"""
    lifeline, keep = os.pipe()
    stdio = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            stdio.append(fd)
        except OSError:
            stdio.append(os.open(os.devnull, os.O_RDWR))
    fds = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in (*stdio, lifeline))
    try:
        sent = conn.sendmsg([frame], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        if sent < len(frame):
            conn.sendall(frame[sent:])
    finally:
        for fd in (lifeline, *(f for f in stdio if f > 2)):
            os.close(fd)
    _LIFELINE.append(keep)  # open until this process ends


def _frame(message: dict[str, Any]) -> bytes:
    """One message: its length (4 bytes, big-endian), then its marshal bytes."""
    body = marshal.dumps(message)
    return len(body).to_bytes(4, "big") + body


def _exactly(conn: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            raise EOFError("the server closed the connection")
        data += more
    return data


def _read(conn: Any) -> dict[str, Any]:
    try:
        head = _exactly(conn, 4)
    except EOFError:
        return {}
    message = marshal.loads(_exactly(conn, int.from_bytes(head, "big")))
    return message if isinstance(message, dict) else {}


def _forward(child: int, signum: int) -> None:
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass


def _now() -> float:
    import time

    return time.time()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def main() -> None:
    hold_signals()
    argv = sys.argv[1:]
    path = server_socket()
    words = command_words(argv)
    if path is None or any(words[: len(local)] == local for local in LOCAL):
        run_here(argv)
    outcome = ask_server(path, argv)
    if outcome is None:
        start_server(path)
        run_here(argv)
    if "signal" in outcome:
        signum = int(outcome["signal"])
        if signum not in (_signal.SIGKILL, _signal.SIGSTOP):
            _signal.signal(signum, _signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # end as the command ended, so a shell reports the same
        sys.exit(128 + signum)
    if "exit" in outcome:
        _signal.pthread_sigmask(_signal.SIG_BLOCK, HELD)  # the command has ended: end as it did
        sys.exit(int(outcome["exit"]))
    sys.stderr.write("error: the command's process ended without saying how (the tether server went away)\n")
    sys.exit(1)


if __name__ == "__main__":
    main()
