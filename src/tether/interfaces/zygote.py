"""The CLI server: a preloaded process that forks each command, and its workers, from a warm image.

A one-shot ``tether`` command spends most of its time importing (typer, rich, pydantic, SQLAlchemy, the
registry) and starting a fork server it will not reuse. The server pays that once per user and
interpreter, then for each request:

- ``{"run": argv, "env", "cwd", "umask"}`` with the client's stdin, stdout and stderr passed as file
  descriptors: it forks a child that takes those descriptors, that environment, folder and umask, and
  runs the command exactly as a fresh ``tether`` process would (a terminal stays a terminal). The child
  watches the client: if the client dies, the child dies with it, as the command itself would have.
  When the child ends, the server sends its exit status, which the client mirrors.
- ``{"spawn": execution_dir[, "keys": {variable: secret}]}`` from one of those commands: it forks a
  worker for it (handed the secrets its task names), reaps it and records its exit code, exactly as the
  fork server does (both use ``tether.execution.forking``).

It serves only its own user (peer credentials are checked), lives in a 0700 folder, refuses to serve
once any module it loaded changed on disk (it lets running commands finish, then exits; the next
command starts a fresh one), and exits after ``IDLE_EXIT_S`` without work. Nothing here imports a
store or opens a database: children do that, each for itself. The server warms its image once
(``_warm``); a spare forked from it inherits that, and never warms again.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import io
import marshal
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.execution.forking import Children, leave_server, run_as_forked_child, take_stdio

IDLE_EXIT_S = 600.0
# How many times this process's image ran ``_warm``: once in the server, and so once in every spare and
# command forked from it (a test reads it in a served command).
warm_ups = 0
REQUEST_LIMIT = 4 * 1024 * 1024  # an environment and argv fit easily; anything larger is refused


def _preload() -> dict[str, float]:
    """Import what commands use, and return the files loaded with their modification times."""
    import pydantic  # noqa: F401
    import sqlalchemy.dialects.sqlite.pysqlite  # noqa: F401 - what create_engine imports lazily

    import tether.agent.session
    import tether.execution.executor
    import tether.execution.worker
    import tether.interfaces.cli
    import tether.interfaces.tour
    import tether.models.factory
    import tether.runtime  # noqa: F401
    from tether.tasks.spec import Registry

    with contextlib.suppress(Exception):  # a broken default registry is each command's own error
        from tether.interfaces.base import DEFAULT_REGISTRY, REGISTRY_ENV

        Registry.load(os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY)
    _warm()
    return _loaded_files()


def _warm() -> None:
    """Run the code paths commands take first, once, so every fork starts with them imported. Nothing
    here starts a thread or keeps a file open (the server forks)."""
    import tempfile

    global warm_ups
    warm_ups += 1

    from tether.interfaces import guard
    from tether.interfaces.cli import app

    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        sink = stack.enter_context(open(os.devnull, "w"))
        stack.enter_context(contextlib.redirect_stdout(sink))
        stack.enter_context(contextlib.redirect_stderr(sink))
        with contextlib.suppress(BaseException):
            guard.run(app, ["--home", scratch, "--help"])
        with contextlib.suppress(BaseException):
            guard.run(app, ["--home", scratch, "tasks", "--json"])
        with contextlib.suppress(BaseException):
            from tether.runtime import Runtime

            Runtime.open(scratch).close()  # SQLAlchemy's engine, pool and SQLite dialect, imported
    from tether.interfaces import render

    render.reset()


def _loaded_files() -> dict[str, float]:
    """What to watch for change: every loaded module outside the standard library and the installed
    packages (tether in a checkout, the user's own task modules), and the folders packages are
    installed into (installing, upgrading or removing one changes the folder). Watching every file
    would cost a millisecond per hundred files on each command."""
    import sysconfig

    installed = {
        os.path.realpath(p)
        for p in {*sysconfig.get_paths().values(), *(e for e in sys.path if e.endswith("-packages"))}
        if p and os.path.isdir(p)
    }
    roots = tuple(os.path.join(p, "") for p in installed)
    files: dict[str, float] = {}
    for path in [*installed, *(getattr(m, "__file__", None) for m in list(sys.modules.values()))]:
        if not path:
            continue
        real = os.path.realpath(path)
        if real in installed or not real.startswith(roots):
            with contextlib.suppress(OSError):
                files[real] = os.stat(real).st_mtime
    return files


def _stale(files: dict[str, float]) -> bool:
    for path, mtime in files.items():
        try:
            if os.stat(path).st_mtime != mtime:
                return True
        except OSError:
            return True
    return False


class Server:
    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.lock_handle: Any = None
        self.listener: socket.socket | None = None
        self.commands: dict[int, socket.socket] = {}  # child pid → the connection of its client
        self.spare: Spare | None = None  # forked from the warm image, waiting for the next command
        self.spares_alive: set[int] = set()
        self.children = Children()  # its workers, and the pipe SIGCHLD wakes the loop through
        self.files: dict[str, float] = {}
        self.identity: list[Any] = []
        self.socket_inode = 0
        self.last_active = time.monotonic()
        self.retiring = False  # asked to stop (SIGTERM): serve what runs, take nothing new

    # -- start ----------------------------------------------------------------------------------

    def claim(self) -> bool:
        """Be the only server for this socket (an flock held for life); False if one already is."""
        lock = self.socket_path.with_suffix(".lock")
        handle = os.fdopen(os.open(lock, os.O_RDWR | os.O_CREAT, 0o600), "r+b")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        self.lock_handle = handle
        self._announce("starting")
        return True

    def _announce(self, state: str) -> None:
        """Write who holds the lock and whether it serves yet, for a person (or a test) who asks."""
        handle = self.lock_handle
        handle.seek(0)
        handle.truncate(0)
        handle.write(f"{os.getpid()} {state}".encode())
        handle.flush()

    def listen(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(str(self.socket_path))
        finally:
            os.umask(old)
        listener.listen(64)
        self.listener = listener
        self.socket_inode = os.stat(self.socket_path).st_ino

    # -- the loop -------------------------------------------------------------------------------

    def serve(self) -> int:
        self.files = _preload()
        from tether.interfaces.handoff import identity

        self.identity = identity()
        gc.collect()
        gc.freeze()  # children do not copy the pages a collection would touch
        self.children.catch_sigchld()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # Only a flag: the handler runs inside select(), which must not see its listener closed.
        signal.signal(signal.SIGTERM, lambda signum, frame: setattr(self, "retiring", True))
        self.listen()
        self.spare = self._raise_spare()
        self._announce("serving")
        while self.listener is not None or self.commands or self.children.workers:
            wake_r = self.children.wake_r
            sources: list[Any] = [wake_r] + ([self.listener] if self.listener is not None else [])
            try:
                readable, _, _ = select.select(sources, [], [], 1.0)
            except InterruptedError:
                readable = []
            if wake_r in readable:
                self.children.drain()
            self._reap()
            if self.retiring:
                self._retire()
            if self.listener is not None and self.listener in readable:
                self._accept()
            idle = not self.commands and not self.children.workers
            if idle and time.monotonic() - self.last_active > IDLE_EXIT_S:
                self._retire()
            if self.listener is not None and not self._still_mine():
                self._retire()
        return 0

    def _still_mine(self) -> bool:
        """Whether the socket file is still the one this server bound (not removed or replaced)."""
        try:
            return os.stat(self.socket_path).st_ino == self.socket_inode
        except OSError:
            return False

    def _retire(self) -> None:
        """Stop taking requests; running commands and workers are still seen to the end."""
        if self.spare is not None:
            with contextlib.suppress(OSError):
                os.kill(self.spare.pid, signal.SIGKILL)  # it holds the old code
            self.spare.channel.close()
            self.spare = None
        if self.listener is None:
            return
        with contextlib.suppress(OSError):
            if self._still_mine():
                self.socket_path.unlink()
        self.listener.close()
        self.listener = None

    def _accept(self) -> None:
        assert self.listener is not None
        conn, _ = self.listener.accept()
        self.last_active = time.monotonic()
        try:
            if not _same_user(conn):
                conn.close()
                return
            conn.settimeout(5.0)
            message, fds = _receive(conn, max_fds=4)
        except (OSError, ValueError):
            conn.close()
            return
        if "spawn" in message and not fds:
            from tether.execution.protocol import ExecutionPaths

            exec_dir = Path(str(message["spawn"]))
            if not (exec_dir.is_absolute() and ExecutionPaths(exec_dir).request.is_file()):
                _send(conn, {"error": f"{exec_dir} is not an execution folder with a request"})
                conn.close()
                return
            keys = message.get("keys") or {}  # the secrets its task names, for this worker alone
            self._spawn_worker(conn, exec_dir, keys if isinstance(keys, dict) else {})
        elif "run" in message and len(fds) == 4:  # stdin, stdout, stderr and the client's lifeline
            if message.get("identity") != self.identity or _stale(self.files):
                _send(conn, {"stale": True})
                for fd in fds:
                    os.close(fd)
                conn.close()
                self._retire()
                return
            self._run_command(conn, message, fds)
        else:
            for fd in fds:
                os.close(fd)
            _send(conn, {"error": "unknown request"})
            conn.close()

    def _inherited(self) -> list[int]:
        """Descriptors a child must close: the server's own, and other clients' connections."""
        fds = self.children.fds
        if self.listener is not None:
            fds.append(self.listener.fileno())
        if self.lock_handle is not None:
            fds.append(self.lock_handle.fileno())
        fds += [conn.fileno() for conn in self.commands.values()]
        return fds

    def _spawn_worker(self, conn: socket.socket, exec_dir: Path, keys: dict[str, object]) -> None:
        pid = self.children.fork_worker(exec_dir, [*self._inherited(), conn.fileno()], keys)
        with contextlib.suppress(OSError):
            _send(conn, {"pid": pid})
        conn.close()

    def _run_command(self, conn: socket.socket, message: dict[str, Any], fds: list[int]) -> None:
        """Hand the request to the waiting spare (forked before it came), then raise the
        next spare: neither the fork nor the first touch of memory is on the command's path."""
        spare = self.spare or self._raise_spare()
        self.spare = None
        try:
            _send_to_spare(spare, message, fds)
        except OSError:
            with contextlib.suppress(OSError):
                os.kill(spare.pid, signal.SIGKILL)
            self.commands[spare.pid] = conn  # reaped below: the client is told how it ended
            spare.channel.close()
            for fd in fds:
                os.close(fd)
            return
        spare.channel.close()
        for fd in fds:
            os.close(fd)
        self.commands[spare.pid] = conn
        with contextlib.suppress(OSError):
            _send(conn, {"pid": spare.pid})
        self.spare = self._raise_spare()

    def _raise_spare(self) -> Spare:
        """Fork a child that waits for one request on a private channel (warm already: it is a copy of
        the server's image)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        inherited = [*self._inherited(), ours.fileno()]
        if self.spare is not None:
            inherited.append(self.spare.channel.fileno())
        pid = os.fork()
        if pid == 0:
            _spare(theirs, inherited, self.socket_path)  # never returns
        theirs.close()
        self.spares_alive.add(pid)
        return Spare(pid=pid, channel=ours)

    def _reap(self) -> None:
        """Reap every child that ended: workers through ``Children`` (their exit codes recorded),
        spares and commands here."""
        if self.children.reap(self._ended, others=bool(self.commands or self.spares_alive)):
            self.last_active = time.monotonic()

    def _ended(self, pid: int, status: int) -> None:
        self.spares_alive.discard(pid)
        if self.spare is not None and pid == self.spare.pid:  # it died waiting: raise another
            self.spare.channel.close()
            self.spare = None if self.listener is None else self._raise_spare()
        if pid in self.commands:
            conn = self.commands.pop(pid)
            outcome = (
                {"signal": os.WTERMSIG(status)}
                if os.WIFSIGNALED(status)
                else {"exit": os.waitstatus_to_exitcode(status)}
            )
            with contextlib.suppress(OSError):
                _send(conn, outcome)
            conn.close()


@dataclass(frozen=True, slots=True)
class Spare:
    pid: int
    channel: socket.socket  # the server's end of the spare's private socketpair


def _send_to_spare(spare: Spare, message: dict[str, Any], fds: list[int]) -> None:
    body = marshal.dumps(message)
    socket.send_fds(spare.channel, [len(body).to_bytes(4, "big") + body], fds)


def _spare(channel: socket.socket, inherited: list[int], socket_path: Path) -> None:
    """Runs in a forked spare: wait for one request, become that command; never returns. The spare is
    forked from the warmed server and starts warm: warming it again would cost most of a served
    command's CPU, for nothing."""
    from tether.interfaces import handoff

    # The client learns this process's pid, and forwards its signals here, as soon as the request is
    # handed over — maybe before this spare has left the server's setup. Blocked, they wait in the
    # kernel until the command can act on them (``_command``), instead of ending a half-made command
    # (-15) or the spare.
    signal.pthread_sigmask(signal.SIG_BLOCK, handoff.HELD)
    try:
        leave_server(inherited, default=(signal.SIGTERM, signal.SIGCHLD))
        message, fds = _receive(channel, max_fds=4)
        if len(fds) != 4:
            raise ValueError("a command comes with four descriptors")
    except BaseException:
        os._exit(71)
    channel.close()
    _command(fds.pop(), message, fds, [], socket_path)


def _same_user(conn: socket.socket) -> bool:
    if not hasattr(socket, "SO_PEERCRED"):
        return True  # the 0700 folder is the guard where the peer cannot be asked
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


def _receive(conn: socket.socket, max_fds: int) -> tuple[dict[str, Any], list[int]]:
    """One framed request (4-byte length, then marshal; see ``client._frame``) and the descriptors
    that came with it. The peer is this user's own process (checked), so marshal is safe to read."""
    data, fds, _, _ = socket.recv_fds(conn, REQUEST_LIMIT, max_fds)
    if len(data) < 4:
        raise ValueError("a request starts with its length")
    size = int.from_bytes(data[:4], "big")
    if size > REQUEST_LIMIT:
        raise ValueError("request too large")
    while len(data) < 4 + size:
        more = conn.recv(4 + size - len(data))
        if not more:
            raise ValueError("the request was cut short")
        data += more
    message = marshal.loads(data[4 : 4 + size])
    if not isinstance(message, dict):
        raise ValueError("a request is a mapping")
    return message, list(fds)


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    body = marshal.dumps(message)
    conn.sendall(len(body).to_bytes(4, "big") + body)


def _command(
    lifeline: int, message: dict[str, Any], fds: list[int], inherited: list[int], socket_path: Path
) -> None:
    """Runs in the forked child: become the client's command, run it, never return."""

    def run() -> int:
        from tether.interfaces import handoff

        os.setsid()
        leave_server(inherited, default=(signal.SIGCHLD,))
        ignored = {int(s) for s in message.get("ignored") or ()}
        for sig in handoff.HELD:  # as the client's own: held until guard.run acts on them, or ignored
            signal.signal(sig, signal.SIG_IGN if sig in ignored else handoff.hold)
        take_stdio(fds)
        os.chdir(str(message.get("cwd") or "/"))
        os.umask(int(message.get("umask", 0o022)))
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(message.get("env") or {}).items()})
        from tether.execution.spawner import ZYGOTE_ENV

        os.environ[ZYGOTE_ENV] = str(socket_path)  # its workers are forked by this server too
        _fresh_stdio()
        _fresh_state()
        threading.Thread(target=_die_with_client, args=(lifeline,), daemon=True).start()
        argv = [str(a) for a in message.get("run") or []]
        sys.argv = ["tether", *argv]
        from tether.interfaces import guard
        from tether.interfaces.cli import app

        signal.pthread_sigmask(signal.SIG_UNBLOCK, handoff.HELD)  # what came meanwhile is held now
        return guard.run(app, argv)

    run_as_forked_child(run)


def _fresh_stdio() -> None:
    """Text streams on the client's descriptors, buffered as they would be in a fresh process."""
    tty = os.isatty(1)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
        encoding="utf-8",
        errors="replace",
        line_buffering=tty,
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="replace",
        line_buffering=True,
    )


def _fresh_state() -> None:
    """Module state that was decided when the server started, decided again for this command."""
    from tether.execution import faults
    from tether.interfaces import render

    faults.reload()
    render.reset()


def _die_with_client(lifeline: int) -> None:
    """The client is the command as far as the person knows: if it is killed, so is the command. Only
    the client holds the write end of ``lifeline``: reading it returns nothing once the client is gone."""
    with contextlib.suppress(OSError):
        while os.read(lifeline, 1):
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def main(socket_path: str, path_entries: list[str]) -> int:
    sys.path[:] = path_entries
    server = Server(Path(socket_path))
    if not server.claim():
        return 0  # another server already serves this socket
    return server.serve()


def send_fds_available() -> bool:
    return hasattr(socket, "send_fds") and hasattr(os, "fork") and hasattr(socket, "AF_UNIX")
