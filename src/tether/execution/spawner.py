"""Starting worker processes: a fork server where the OS has fork, a fresh interpreter elsewhere.

Both spawners put each worker in its own session / process group with stdio on ``worker.log`` and
record each worker's exit code in its result file when they reap it (``reap()``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Protocol

from tether.credentials import KEYS_FD_ENV, keys_pipe
from tether.errors import JobError
from tether.execution import faults, process
from tether.execution.environment import worker_env
from tether.execution.process import ProcessRef
from tether.execution.protocol import ExecutionPaths, write_exit

FORKSERVER_START_TIMEOUT_S = 30.0


# What a spawner hands one worker besides its request: the secrets its task names (``TaskSpec.secrets``),
# variable → value, through a pipe or the spawner's own channel, never a file or an environment.
Keys = Mapping[str, str]


class Spawner(Protocol):
    def spawn(self, paths: ExecutionPaths, keys: Keys | None = None) -> ProcessRef: ...

    def reap(self) -> None: ...

    def close(self) -> None: ...


def _identity(pid: int) -> ProcessRef:
    ref = process.ref_of(pid)
    # A worker that died within microseconds still had this pid; its start time is unknowable now,
    # and a ProcessRef that matches nothing is the honest answer: the worker counts as exited.
    return ref if ref is not None else ProcessRef(pid=pid, create_time=-1.0)


# Children of this process that were not reaped yet, across spawners: a worker may outlive the
# executor that started it, and this process stays responsible for reaping it while it lives.
_UNREAPED: dict[Path, subprocess.Popen[bytes]] = {}


class SubprocessSpawner:
    """One fresh interpreter per worker (``worker_command``); the parent reaps through Popen."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._children = _UNREAPED
        self._env = dict(worker_env() if env is None else env)

    def spawn(self, paths: ExecutionPaths, keys: Keys | None = None) -> ProcessRef:
        faults.point("spawner.before_spawn")
        env, pipe = self._env, keys_pipe(keys)
        if pipe is not None:
            env = {**env, KEYS_FD_ENV: str(pipe)}
        with os.fdopen(os.open(paths.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
            kwargs: dict[str, object] = {}
            if sys.platform == "win32":
                kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]
            else:
                kwargs["start_new_session"] = True
            try:
                child = subprocess.Popen(
                    process.worker_command(paths.dir),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    close_fds=True,
                    pass_fds=() if pipe is None else (pipe,),
                    env=env,
                    **kwargs,  # type: ignore[arg-type]
                )
            finally:
                if pipe is not None:
                    os.close(pipe)
        self._children[paths.dir] = child
        return _identity(child.pid)

    def reap(self) -> None:
        for exec_dir, child in list(self._children.items()):
            code = child.poll()
            if code is not None:
                del self._children[exec_dir]
                with contextlib.suppress(OSError):
                    write_exit(ExecutionPaths(exec_dir), code, child.pid)

    def close(self) -> None:
        self.reap()


class ForkServerSpawner:
    """Forks workers from a pre-started server that has the registry preloaded (POSIX only)."""

    def __init__(self, registry_ref: str, log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.registry_ref = registry_ref
        self.log_path = log_path
        self._env = dict(worker_env() if env is None else env)
        self._lock = threading.Lock()
        self._server: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._sent = 0  # requests sent so far: each one's id

    def start(self) -> None:
        """Start the server without waiting for it (the first ``spawn`` waits)."""
        with self._lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._server is not None:
            if self._server.poll() is None:
                return
            self._kill_server()  # it died: reap it and close its pipes before starting another
        self.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(log_fd, "ab") as log:
            self._server = subprocess.Popen(
                process.forkserver_command(self.registry_ref),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                close_fds=True,
                start_new_session=True,
                env=self._env,
                bufsize=0,  # unbuffered, so select() on stdout never misses a line already read
            )
        self._ready = False

    def _readline(self, stream: IO[bytes], timeout: float) -> str:
        import select

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobError(f"the fork server did not answer within {timeout:.0f}s; see {self.log_path}")
            readable, _, _ = select.select([stream], [], [], left)
            if readable:
                return stream.readline().decode().strip()

    def _answer_to(self, stream: IO[bytes], ident: int) -> dict[str, object]:
        """The server's answer to request ``ident``; an answer to an earlier request (one whose wait
        timed out) is skipped, never taken for this one."""
        deadline = time.monotonic() + FORKSERVER_START_TIMEOUT_S
        while True:
            line = self._readline(stream, max(0.0, deadline - time.monotonic()))
            try:
                answer = json.loads(line)
            except ValueError as exc:
                raise JobError(f"the fork server answered {line[:200]!r}; see {self.log_path}") from exc
            if not isinstance(answer, dict):
                raise JobError(f"the fork server answered {line[:200]!r}; see {self.log_path}")
            if answer.get("id") == ident:
                return answer
            if answer.get("id") is None:
                raise JobError(f"the fork server could not read a request: {answer.get('error')!r}")

    def spawn(self, paths: ExecutionPaths, keys: Keys | None = None) -> ProcessRef:
        faults.point("spawner.before_spawn")
        with self._lock:
            for attempt in (1, 2):
                self._start_locked()
                server = self._server
                assert server is not None and server.stdin is not None and server.stdout is not None
                try:
                    if not self._ready:
                        line = self._readline(server.stdout, FORKSERVER_START_TIMEOUT_S)
                        if line != "ready":
                            raise JobError(f"the fork server failed to start ({line!r}); see {self.log_path}")
                        self._ready = True
                    self._sent += 1
                    request: dict[str, object] = {"id": self._sent, "spawn": str(paths.dir)}
                    if keys:
                        request["keys"] = dict(keys)  # over the server's stdin pipe, never a file
                    server.stdin.write(json.dumps(request).encode() + b"\n")
                    server.stdin.flush()
                    answer = self._answer_to(server.stdout, self._sent)
                except (BrokenPipeError, OSError, JobError):
                    self._kill_server()
                    if attempt == 2:
                        raise
                    continue
                if "pid" not in answer:
                    raise JobError(
                        f"the fork server could not start a worker: {answer.get('error', answer)!r}"
                    )
                faults.point("spawner.after_spawn")  # the worker runs; its starter does not know yet
                return _identity(int(str(answer["pid"])))
        raise AssertionError("unreachable")

    def reap(self) -> None:
        """The server reaps its own children and writes their exit codes."""

    def _kill_server(self) -> None:
        server, self._server = self._server, None
        self._ready = False
        if server is None:
            return
        with contextlib.suppress(OSError):
            server.kill()
        with contextlib.suppress(Exception):
            server.wait(timeout=5)
        for pipe in (server.stdin, server.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            if server is None:
                return
            with contextlib.suppress(OSError):
                if server.stdin is not None:
                    server.stdin.close()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=5)
            if server.stdout is not None:
                server.stdout.close()


class ZygoteSpawner:
    """Asks the CLI server this command was forked from to fork its workers too (``ZYGOTE_ENV`` names
    its socket): the server has everything preloaded and outlives the command, so a one-shot command
    pays for no fork server of its own. The server reaps the workers and writes their exit codes."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path

    def spawn(self, paths: ExecutionPaths, keys: Keys | None = None) -> ProcessRef:
        import marshal
        import socket

        faults.point("spawner.before_spawn")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(FORKSERVER_START_TIMEOUT_S)
                conn.connect(self.socket_path)
                message: dict[str, object] = {"spawn": str(paths.dir)}
                if keys:
                    message["keys"] = dict(keys)  # over the server's own-user socket, never a file
                body = marshal.dumps(message)
                conn.sendall(len(body).to_bytes(4, "big") + body)
                replies = conn.makefile("rb")
                size = int.from_bytes(replies.read(4), "big")
                answer = marshal.loads(replies.read(size)) if size else {}
        except (OSError, ValueError, EOFError) as exc:
            raise JobError(f"the tether server could not start a worker: {exc}") from exc
        if "pid" not in answer:
            raise JobError(f"the tether server could not start a worker: {answer.get('error', answer)}")
        return _identity(int(answer["pid"]))

    def reap(self) -> None:
        """The server reaps its children and writes their exit codes."""

    def close(self) -> None:
        pass


# Set in a command that the CLI server forked: the server's socket, for its workers.
ZYGOTE_ENV = "TETHER_ZYGOTE_SOCKET"


def default_spawner(
    registry_ref: str, home: Path, *, forkserver: bool, env: Mapping[str, str] | None = None
) -> Spawner:
    zygote = os.environ.get(ZYGOTE_ENV)
    if forkserver and zygote:
        return ZygoteSpawner(zygote)
    if forkserver and hasattr(os, "fork") and not getattr(sys, "frozen", False):
        return ForkServerSpawner(registry_ref, home / "logs" / "forkserver.log", env)
    return SubprocessSpawner(env)
