"""Hosts for the several-hosts tests: each a network namespace of its own, joined to the test's
namespace by a veth pair, whose only way to PostgreSQL is a TCP relay on its side of the pair. Cutting
a host off takes its link down and drops the relay's connections to the server (as the server does
once it finds a client gone); killing a host kills every process in its namespace.

Needs root and iproute2 (``ip netns``); ``available()`` says why not otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.support.helpers import ROOT, wait_for

PG = ("127.0.0.1", 5432)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def available() -> str | None:
    """None when this machine can make hosts; otherwise why not."""
    if os.name != "posix" or os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"tprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()[:200]}"
    _ip("netns", "del", probe, check=False)
    return None


class Relay:
    """A TCP relay from ``listen`` to PostgreSQL, in a thread; ``cut`` drops every connection it holds."""

    def __init__(self, listen: tuple[str, int]) -> None:
        self.server = socket.create_server(listen, reuse_port=False)
        self.server.settimeout(0.2)
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.hanging: list[socket.socket] = []  # the host's side of connections cut: closed at the end
        self.guard = threading.Lock()
        self.down = False  # partitioned and not healed: a connection accepted meanwhile is dropped at once
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                inner, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            try:
                outer = socket.create_connection(PG, timeout=5)
            except OSError:
                inner.close()
                continue
            outer.settimeout(None)
            inner.settimeout(None)
            with self.guard:
                if self.down:  # accepted just as the link went down: the cut drops it too
                    outer.close()
                    self.hanging.append(inner)
                    continue
                self.pairs.append((inner, outer))
            for a, b in ((inner, outer), (outer, inner)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self, *, partition: bool = False) -> None:
        """The server's side of every connection is closed (it rolls back what they had open); the
        host's side is left hanging, as a dropped link leaves it. ``partition``: until healed, so is any
        connection that was being accepted as the link went down."""
        with self.guard:
            pairs, self.pairs = self.pairs, []
            self.down = self.down or partition
        for inner, outer in pairs:
            # shutdown, not only close: a socket closed while its pipe thread waits in recv() on it stays
            # open in the kernel, and the server would never learn the connection is gone
            with contextlib.suppress(OSError):
                outer.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                outer.close()
            self.hanging.append(inner)

    def close(self) -> None:
        self.closed.set()
        self.cut()
        for inner in self.hanging:
            with contextlib.suppress(OSError):
                inner.close()
        self.server.close()
        self.thread.join(timeout=5)


class Host:
    """One host: a network namespace, a home on the test's PostgreSQL database, and its processes."""

    def __init__(self, name: str, index: int, home: Path, settings: str, env: dict[str, str]) -> None:
        self.name = name
        tag = f"{os.getpid() % 10000}x{index}"
        self.ns, self.link = f"tn{tag}", f"tv{tag}"
        net = f"10.{100 + os.getpid() % 150}.{index}"
        self.outside, self.inside = f"{net}.1", f"{net}.2"
        _ip("netns", "add", self.ns)
        _ip("link", "add", self.link, "type", "veth", "peer", "name", f"{self.link}p")
        _ip("link", "set", f"{self.link}p", "netns", self.ns)
        _ip("addr", "add", f"{self.outside}/30", "dev", self.link)
        _ip("link", "set", self.link, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.inside}/30", "dev", f"{self.link}p")
        _ip("-n", self.ns, "link", "set", f"{self.link}p", "up")
        _ip("-n", self.ns, "link", "set", "lo", "up")
        self.relay = Relay((self.outside, PG[1]))
        self.home = home
        home.mkdir(parents=True)
        (home / "settings.toml").write_text(settings.replace("{db_host}", self.outside))
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []

    def command(self, args: list[str], *, version: str | None = None) -> list[str]:
        python = [sys.executable, "-m", "tether.interfaces.cli"]
        if version is not None:  # the same code under another application version (an upgrade's)
            boot = ("import sys, tether.supervisor.durable as d; d.APP_VERSION = sys.argv.pop(1); "
                    "from tether.interfaces.cli import main; main()")  # fmt: skip
            python = [sys.executable, "-c", boot, version]
        return ["ip", "netns", "exec", self.ns, *python, *args]

    def start(
        self, args: list[str], out: Path, *, version: str | None = None, **env: str
    ) -> subprocess.Popen[bytes]:
        full = {**os.environ, **self.env, "TETHER_HOME": str(self.home), "TETHER_CLI_SERVER": "0", **env}
        with out.open("ab") as said:
            proc = subprocess.Popen(
                self.command(args, version=version), env=full, cwd=ROOT, stdout=said,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def pids(self) -> list[int]:
        found = _ip("netns", "pids", self.ns, check=False).stdout.split()
        return [int(p) for p in found if p.isdigit()]

    def kill(self) -> None:
        """The host dies: every process in it, at once."""
        for _ in range(3):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not self.pids(), timeout=30)
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)
        self.relay.cut()

    def cut(self) -> None:
        """The host is cut off: its link drops every packet, and the server forgets its connections."""
        _ip("link", "set", self.link, "down")
        self.relay.cut(partition=True)

    def heal(self) -> None:
        with self.relay.guard:
            self.relay.down = False
        _ip("link", "set", self.link, "up")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.kill()
        self.relay.close()
        _ip("netns", "del", self.ns, check=False)
        _ip("link", "del", self.link, check=False)


def run(
    cli_home: Path, env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """A ``tether`` command on this (the test's) host."""
    full = {**os.environ, **env, "TETHER_HOME": str(cli_home), "TETHER_CLI_SERVER": "0"}
    return subprocess.run(
        [sys.executable, "-m", "tether.interfaces.cli", *args], env=full, cwd=ROOT, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


def settle(proc: Any, timeout: float = 30) -> int | None:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
