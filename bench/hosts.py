"""Processes and CPU for the several-hosts row (``bench/cluster.py``): a worker process that can be
frozen (SIGSTOP) and let go with its descendants, the PostgreSQL backends connected to a database, and a
meter of CPU per process that sums only the processes seen at the end of a window (a process that left
meanwhile would otherwise subtract what it had used before)."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
STARTED_WITHIN_S = 120.0  # four workers and four plain processes launching at once on two cores
STOPPED_WITHIN_S = 15.0
Sample = dict[tuple[str, int], float]


@dataclass(slots=True, kw_only=True)
class Proc:
    """A worker of either side, its log (stdout and stderr), and its DBOS executor id once ready."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    ready: Callable[[str], str | None]
    executor_id: str = ""

    def tree(self) -> list[psutil.Process]:
        try:
            top = psutil.Process(self.proc.pid)
            return [top, *top.children(recursive=True)]
        except psutil.Error:
            return []

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTED_WITHIN_S
        while (found := self.ready(self.log.read_text(errors="replace"))) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                how = "in time" if self.proc.returncode is None else f"(exit {self.proc.returncode})"
                raise RuntimeError(f"{self.name} did not start {how}; its output:\n{tail}")
            time.sleep(0.05)
        self.executor_id = found

    def freeze(self) -> None:
        for proc in self.tree():
            with contextlib.suppress(psutil.Error):
                proc.suspend()

    def thaw(self) -> None:
        for proc in self.tree():
            with contextlib.suppress(psutil.Error):
                proc.resume()

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.thaw()
        self.proc.send_signal(signal.SIGINT)  # Ctrl-C: DBOS shut down, a worker leaves the registry
        try:
            self.proc.wait(STOPPED_WITHIN_S)
        except subprocess.TimeoutExpired:
            for proc in reversed(self.tree()):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            self.proc.wait()


def start_process(
    name: str, command: list[str], log: Path, ready: Callable[[str], str | None], **extra: str
) -> Proc:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "TETHER_CLI_SERVER": "0", **extra}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
    return Proc(name=name, proc=proc, log=log, ready=ready)


def connect(url: str) -> Any:
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return psycopg.connect(
        host=u.host,
        port=u.port or 5432,
        user=u.username,
        password=u.password,
        dbname=u.database,
        autocommit=True,
        connect_timeout=5,
    )


def system_url(url: str) -> str:
    """DBOS's URL of a database (its own driver), the password kept."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Backends:
    """The PostgreSQL backends connected to a database, found on a connection of the bench's own to the
    server's own database (no part of any side)."""

    def __init__(self, admin_url: str) -> None:
        self._conn = connect(admin_url)
        self.ignored: set[int] = set()  # the bench's own connections to a side's database
        self.most: dict[str, int] = {}  # the most connections seen to each database, the bench's included

    def of(self, database: str) -> list[int]:
        rows = self._conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,))
        pids = [int(r[0]) for r in rows]
        self.most[database] = max(self.most.get(database, 0), len(pids))
        return [pid for pid in pids if pid not in self.ignored]

    def close(self) -> None:
        self._conn.close()


@dataclass(slots=True, kw_only=True)
class Meter:
    """CPU seconds per process, keyed ``("proc", pid)`` (the trees of ``procs``), ``("pg", pid)`` (the
    backends of ``database``) and, with ``own``, ``("own", 0)``: this process (getrusage, every thread)."""

    procs: Callable[[], list[Proc]]
    backends: Backends
    database: str
    own: bool = False

    def sample(self, *, before: bool) -> Sample:
        # Finding the others costs this process a query and a walk over /proc: kept out of the window.
        if before:
            return {**self._others(), **self._own()}
        mine = self._own()
        return {**self._others(), **mine}

    def _own(self) -> Sample:
        me = resource.getrusage(resource.RUSAGE_SELF)
        return {("own", 0): me.ru_utime + me.ru_stime} if self.own else {}

    def _others(self) -> Sample:
        procs = [("proc", p) for worker in self.procs() for p in worker.tree()]
        for pid in self.backends.of(self.database):
            with contextlib.suppress(psutil.Error):
                procs.append(("pg", psutil.Process(pid)))
        found: Sample = {}
        for kind, proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue  # gone between the walk and the read
            found[kind, proc.pid] = times.user + times.system + times.children_user + times.children_system
        return found


def spent(before: Sample, after: Sample, kind: str = "") -> float:
    """CPU seconds between two samples, of the processes seen in the second (only ``kind``'s if given)."""
    return sum(max(0.0, cpu - before.get(key, 0.0)) for key, cpu in after.items() if kind in ("", key[0]))
