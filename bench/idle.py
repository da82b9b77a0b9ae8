"""An idle executor against its floor: the CPU a ``tether worker`` with nothing to run uses per second of
wall time, next to a plain DBOS process that idles with one queue and nothing else, on SQLite and, when
the tests' server answers (as in ``bench/flows.py``), on PostgreSQL.

- ours: ``tether worker`` on a fresh home, in its own process (``TETHER_CLI_SERVER=0``);
- the floor: DBOS configured as tether configures it — its queue, and its notification listener, polled
  every ``durable.POLL_S`` — launched on a fresh system database by a plain Python process (this module,
  run as ``python -m bench.idle floor``: DBOS and nothing of tether's);
- for the record: the same plain process with DBOS's defaults (both polled every second).

Every process starts fresh, is left to finish starting (its line on stdout, not a fixed sleep) and stays
alive to the end. Their CPU is read in windows of ``WINDOW_S``, one process at a time, interleaved (ours,
floor, reference; the order reversed every other round); a row reports the median of the per-round
ratios and each side's share of a core (its CPU over all its windows, divided by their wall time). CPU is
the process and its descendants (psutil: user + system, reaped children included) and, on PostgreSQL,
the server's backends connected to its database (where each poll's statements run).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench import goals
from bench.paired import why_not

ROOT = Path(__file__).resolve().parent.parent
SMALL_ENV = "TETHER_BENCH_SMALL"  # `python -m bench --small`: fewer windows, to prove the rows work
WINDOW_S = 3.0
ROUNDS = 6
SMALL_ROUNDS = 2
STARTED_WITHIN_S = 90.0  # a fresh home's migrations and DBOS's launch, on a loaded machine
STOPPED_WITHIN_S = 10.0
READY = "runs the flows"  # `tether worker`'s line once it executes (flow_cli.worker_command)
FLOOR_READY = "plain DBOS idles"
FLOOR_APP = "bench-idle"
FLOOR_QUEUE = "bench-idle-queue"
DBOS_DEFAULT_POLL_S = 1.0  # DBOS's own default, for a queue and for the notification listener


@dataclass(slots=True, kw_only=True)
class Idler:
    """One idle process, its log (stdout and stderr), and the CPU seen in its windows."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    ready: str
    backends: Callable[[], list[int]] = list
    cpu_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)

    def cpu(self) -> float:
        """CPU seconds so far: the process tree, and on PostgreSQL the backends serving its database."""
        pids: list[int] = []
        try:
            top = psutil.Process(self.proc.pid)
            pids = [top.pid, *(child.pid for child in top.children(recursive=True))]
        except psutil.Error:
            pass
        total = 0.0
        for pid in [*pids, *self.backends()]:
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue  # gone between the walk and the read
            total += times.user + times.system + times.children_user + times.children_system
        return total

    def window(self) -> float:
        """CPU seconds per second of wall over one window of ``WINDOW_S``."""
        cpu, start = self.cpu(), time.monotonic()
        time.sleep(WINDOW_S)
        wall = time.monotonic() - start
        spent = self.cpu() - cpu
        self.cpu_s.append(spent)
        self.wall_s.append(wall)
        return spent / wall

    def share(self) -> float:
        return sum(self.cpu_s) / sum(self.wall_s)

    def wait_ready(self) -> None:
        """Until its line is on stdout, within ``STARTED_WITHIN_S``."""
        deadline = time.monotonic() + STARTED_WITHIN_S
        while self.ready not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                how = "in time" if self.proc.returncode is None else f"(exit {self.proc.returncode})"
                raise RuntimeError(f"{self.name} did not start {how}; its output:\n{tail}")
            time.sleep(0.05)

    def stop(self) -> None:
        # SIGINT is Ctrl-C: the worker shuts DBOS down and lets its slot go
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(STOPPED_WITHIN_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "TETHER_CLI_SERVER": "0", **extra}


def _start(name: str, command: list[str], log: Path, ready: str, env: dict[str, str]) -> Idler:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
    return Idler(name=name, proc=proc, log=log, ready=ready)


def idle(home: Path) -> None:
    from tether.supervisor import durable

    for backend in ("sqlite", "postgresql"):
        where = home / backend
        where.mkdir(parents=True, exist_ok=True)
        if backend == "sqlite":
            _measure("SQLite", where, durable.POLL_S, None)
            continue
        from bench.flows import PG_URL, PG_URL_ENV, _fresh_pg_database  # imports DBOS: only here

        databases: list[Generator[str]] = []
        try:
            urls = []
            for _ in range(3):  # ours, the floor, the reference: each on a database of its own
                databases.append(_fresh_pg_database())
                urls.append(next(databases[-1]))
        except Exception as exc:  # any failure to reach the server is the reason the row is missing
            print(f"\nidle executor on PostgreSQL: not measured: no server at {PG_URL} ({exc});"
                  f" set {PG_URL_ENV}")  # fmt: skip
            for database in databases:
                database.close()
            continue
        try:
            _measure("PostgreSQL", where, durable.POLL_S, urls)
        finally:
            for database in databases:
                database.close()


def _measure(database: str, where: Path, poll_s: float, urls: list[str] | None) -> None:
    """Start ours, the floor and the reference; measure them in interleaved windows; stop them."""
    rounds = SMALL_ROUNDS if os.environ.get(SMALL_ENV) else ROUNDS
    ours_env, systems = _env(), [f"sqlite:///{where / side / 'dbos.sqlite'}" for side in ("floor", "default")]
    if urls is not None:
        ours_env, systems = _postgresql(where / "ours", urls)
    worker = [sys.executable, "-m", "tether.interfaces.cli", "--home", str(where / "ours"), "worker"]
    floor_cmd = [sys.executable, "-m", "bench.idle", "floor"]
    backends = _Backends(urls) if urls is not None else None
    idlers = [
        _start("tether worker", worker, where / "ours.log", READY, ours_env),
        _start("plain DBOS", [*floor_cmd, systems[0], str(poll_s)], where / "floor.log", FLOOR_READY, _env()),
        _start("plain DBOS, defaults", [*floor_cmd, systems[1], str(DBOS_DEFAULT_POLL_S)],
               where / "default.log", FLOOR_READY, _env()),
    ]  # fmt: skip
    try:
        if backends is not None:
            for k, idler in enumerate(idlers):
                idler.backends = lambda k=k: backends.of(k)
        for idler in idlers:
            try:
                idler.wait_ready()
            except RuntimeError as exc:  # the row is missing, and why; the other rows still run
                print(f"\nidle executor on {database}: not measured: {exc}")
                return
        print(
            f"\nidle executor (`tether worker` on a fresh home, nothing to run; {database}):"
            f" CPU per second of wall, windows of {WINDOW_S:g} s"
        )
        for idler in idlers:  # a warm-up window each: what a launch leaves to finish is no part of idling
            idler.window()
            idler.cpu_s.clear()
            idler.wall_s.clear()
        ratios: list[list[float]] = [[], []]
        for i in range(rounds):
            shares = {}
            for idler in idlers if i % 2 == 0 else idlers[::-1]:
                shares[idler.name] = idler.window()
            for k, other in enumerate(idlers[1:]):
                ratios[k].append(shares[idlers[0].name] / max(shares[other.name], 1e-9))
        _report(idlers, ratios, poll_s, rounds, urls is not None)
    finally:
        for idler in idlers:
            idler.stop()
        if backends is not None:
            backends.close()


def _postgresql(home: Path, urls: list[str]) -> tuple[dict[str, str], list[str]]:
    """The worker's environment with ``home`` on ``urls[0]`` (its password in the environment, as
    ``bench/flows.py`` does), and the system database URLs of the floor and the reference."""
    from sqlalchemy.engine import make_url

    parsed = make_url(urls[0])
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.toml").write_text(
        f'[store]\ndatabase_url = "postgresql+psycopg://{parsed.username}@{parsed.host}:'
        f'{parsed.port or 5432}/{parsed.database}"\n'
    )
    systems = [make_url(url).set(drivername="postgresql") for url in urls[1:]]
    return _env(TETHER_API_KEY_DATABASE=parsed.password or ""), [
        url.render_as_string(hide_password=False) for url in systems
    ]


def _report(idlers: list[Idler], ratios: list[list[float]], poll_s: float, rounds: int, pg: bool) -> None:
    ours, floor, default = idlers
    whose = "the process tree (psutil)" + (" + the PostgreSQL backends of its database" if pg else "")
    ratio = statistics.median(ratios[0])
    goal = goals.IDLE_EXECUTOR
    met = ratio <= goal.limit
    print(
        f"  {'idle executor, share of a core':<44} ours {ours.share() * 100:5.1f}%"
        f"   floor {floor.share() * 100:5.1f}% = {ratio:5.2f}x"
        f"   goal ≤ {goal.limit:g}x cpu: {'met' if met else 'not met'}"
    )
    print(
        f"  {'':<44} paired with: plain DBOS idling, its queue and notifications polled every"
        f" {poll_s * 1000:.0f} ms as tether sets them, nothing else; CPU of {whose};"
        f" median of {rounds} paired windows"
    )
    if not met:
        why_not(goal.why)
    print(
        f"  {'the same, against DBOS as it comes':<44} ours {ours.share() * 100:5.1f}%"
        f"   floor {default.share() * 100:5.1f}% = {statistics.median(ratios[1]):5.2f}x   no goal"
    )
    print(
        f"  {'':<44} paired with: the same plain DBOS with its defaults (polled every"
        f" {DBOS_DEFAULT_POLL_S:g} s), for the record"
    )


class _Backends:
    """The PostgreSQL backends connected to each side's database, found on a connection of the bench's
    own to the tests' database (its backend is no part of any side)."""

    def __init__(self, urls: list[str]) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        from bench.flows import PG_URL

        parsed = make_url(urls[0])
        self._names = [make_url(url).database or "" for url in urls]
        self._conn = psycopg.connect(
            host=parsed.host, port=parsed.port or 5432, user=parsed.username, password=parsed.password,
            dbname=make_url(PG_URL).database, autocommit=True, connect_timeout=5,
        )  # fmt: skip

    def of(self, side: int) -> list[int]:
        rows = self._conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (self._names[side],))
        return [int(row[0]) for row in rows]

    def close(self) -> None:
        self._conn.close()


def floor(url: str, poll_s: float) -> None:
    """A plain DBOS process: one queue polled every ``poll_s`` (the notification listener too), no
    workflow, idle until stopped. DBOS and nothing of tether's."""
    import sqlite3

    from dbos import DBOS, DBOSClient

    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # as tether keeps its DBOS file (durable.prepare)
    DBOS.migrate(url)
    client = DBOSClient(system_database_url=url, application_name=FLOOR_APP)
    try:
        client.register_queue(FLOOR_QUEUE, polling_interval_sec=poll_s)
    finally:
        client.destroy()
    DBOS(
        config={
            "name": FLOOR_APP,
            "system_database_url": url,
            "notification_listener_polling_interval_sec": poll_s,
            "log_level": "WARNING",
            "run_migrations": False,
        }
    )
    DBOS.launch()
    print(FLOOR_READY, flush=True)
    try:
        signal.pause()  # idle, as an executor with nothing to run, until Ctrl-C (``Idler.stop``)
    except KeyboardInterrupt:
        DBOS.destroy(workflow_completion_timeout_sec=0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["floor"]:
        floor(sys.argv[2], float(sys.argv[3]))
