"""What one flow run asks of PostgreSQL, statement by statement: ``python -m bench.statements [RUNS]``.

Not a row of ``make bench`` (it needs the server's log and a role that may change a database's logging):
the tool behind the transaction counts ``bench/goals.py`` gives for the several-hosts rows. On a fresh
database of the tests' server (``TETHER_TEST_PG_URL``) with ``log_statement = 'all'``, one ``tether
worker`` drains RUNS runs of one inline task, then RUNS runs of ten chained inline tasks; the statements
the server logged for that database in each window (every process: the worker, the enqueuing process,
DBOS) are counted per run and grouped by their text with literals blanked, most frequent first.

The server's log is read from ``TETHER_BENCH_PG_LOG`` (Debian's ``/var/log/postgresql/postgresql-15-
main.log`` by default). The worker's own background polls fall in the windows too (a few per second).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

from bench.cluster import REGISTRY, registry
from bench.hosts import connect, start_process

LOG_ENV = "TETHER_BENCH_PG_LOG"
LOG = Path(os.environ.get(LOG_ENV, "/var/log/postgresql/postgresql-15-main.log"))
LOGGED = re.compile(r"LOG:  (?:statement|execute [^:]*): (.*)")
SHOWN = 25  # statements listed per window


def _shape(statement: str) -> str:
    blanked = re.sub(r"'[^']*'", "?", statement.strip())
    return re.sub(r"\b\d+(\.\d+)?\b", "N", blanked)[:150]


def _window(database: str, start: int, end: int) -> list[str]:
    with open(LOG, "rb") as log:
        log.seek(start)
        text = log.read(end - start).decode(errors="replace")
    return [
        m.group(1) for line in text.splitlines() if f"@{database} " in line and (m := LOGGED.search(line))
    ]


def _plan(tasks: int) -> object:
    from tether.supervisor.plan import Call, Plan, Task

    chain = [
        Task(id=f"t{k}", call=Call(task="c.small"), depends_on=[f"t{k - 1}"] if k else [])
        for k in range(tasks)
    ]
    return Plan(caller="cli", tasks=chain)


def _measure(runtime: object, database: str, runs: int, tasks: int) -> None:
    from sqlalchemy import text

    from tether.supervisor import service

    rt: object = runtime
    start = LOG.stat().st_size
    ids = [service.start(rt, registry, _plan(tasks)).run_id for _ in range(runs)]  # type: ignore[arg-type]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with rt.db.read() as conn:  # type: ignore[attr-defined]
            done = conn.execute(
                text("SELECT count(*) FROM runs WHERE status = 'completed' AND run_id = ANY(:ids)"),
                {"ids": ids},
            ).scalar()
        if done == runs:
            break
        time.sleep(0.05)
    time.sleep(1.0)  # the log catches up with the last statements
    found = _window(database, start, LOG.stat().st_size)
    ends = sum(1 for s in found if s.strip().upper() == "COMMIT")
    per_run, per_task = len(found) / runs, len(found) / runs / tasks
    print(f"\nruns of {tasks} inline task(s), {runs} of them: {per_run:.1f} statements and")
    print(f"{ends / runs:.1f} commits a run ({per_task:.1f} and {ends / runs / tasks:.1f} a task)")
    for shape, count in Counter(_shape(s) for s in found).most_common(SHOWN):
        print(f"  {count / runs:7.1f}  {shape}")


def main(argv: list[str]) -> int:
    from psycopg import sql
    from sqlalchemy.engine import make_url

    from bench.flows import _fresh_pg_database

    runs = int(argv[0]) if argv else 10
    if not LOG.exists():
        print(f"no server log at {LOG}: set {LOG_ENV}")
        return 2
    made = _fresh_pg_database()
    url = next(made)
    parsed = make_url(url)
    database = parsed.database or ""
    with connect(url) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} SET log_statement = 'all'").format(sql.Identifier(database)))
    home = Path(os.environ.get("TMPDIR", "/tmp")) / f"tether-statements-{database}"
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.toml").write_text(
        f'[store]\ndatabase_url = "postgresql+psycopg://{parsed.username}@{parsed.host}:'
        f'{parsed.port or 5432}/{database}"\n[cluster]\nlease_s = 600\n'
    )
    os.environ.update({"TETHER_HOME": str(home), "TETHER_API_KEY_DATABASE": parsed.password or ""})
    command = [sys.executable, "-m", "tether.interfaces.cli", "--registry", REGISTRY, "worker"]
    worker = start_process(
        "tether worker", command, home / "worker.log", lambda t: "ok" if "runs the" in t else None
    )
    try:
        worker.wait_ready()
        from tether.runtime import Runtime

        with Runtime.open(home) as runtime:
            _measure(runtime, database, 2, 1)  # warm: the worker's first run imports and prepares
            for tasks in (1, 10):
                _measure(runtime, database, runs, tasks)
    finally:
        worker.stop()
        made.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
