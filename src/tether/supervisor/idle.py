"""An idle executor costs next to nothing.

DBOS's queue thread polls the queue every ``durable.POLL_S`` (50 ms, so that a turn or a run starts
at once) with a claim transaction and a re-read of the queue's settings, and builds both statements
anew each time: about 9 ms of CPU per poll on a 2-core machine, a fifth of a core for an executor with
nothing to do. ``quiet_when_idle`` puts one cheap question in front of each poll — is anything of
this queue waiting to start? — and lets DBOS's own poll run only when the answer is yes. The latency
of a start stays ``POLL_S``; what DBOS does once there is work is untouched.

It hooks two methods of DBOS's system database object (``dequeue_scopes`` and ``get_queue``): the
suite's ``test_idle`` fails if a DBOS upgrade renames them, and ``bench/idle.py`` prints the cost.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

# A queue's settings are read again at least this often (DBOS re-reads them on every poll).
SETTINGS_TTL_S = 1.0
WAITING = ("ENQUEUED", "DELAYED")  # the statuses a dequeue looks at


def quiet_when_idle(sys_db: Any, queue_name: str, allowed: Callable[[], bool] | None = None) -> Waiting:
    """Skip DBOS's polls of ``queue_name`` while none of its workflows waits to start, or while
    ``allowed()`` says this executor may not take its work (a resource's queue whose hold it lacks).
    Close what it returns once DBOS is destroyed. Several queues chain their hooks."""
    waiting = Waiting(sys_db, queue_name)
    dequeue_scopes, get_queue = sys_db.dequeue_scopes, sys_db.get_queue
    kept: list[tuple[float, Any]] = [(0.0, None)]  # (read at, the queue's settings); one tuple, swapped whole

    def scopes(name: str) -> list[Any]:
        if name == queue_name and ((allowed is not None and not allowed()) or not waiting.any()):
            return []
        return dequeue_scopes(name)

    def queue(name: str, **kwargs: Any) -> Any:
        if name != queue_name or kwargs:
            return get_queue(name, **kwargs)
        now = time.monotonic()
        at, found = kept[0]
        if found is not None and now - at < SETTINGS_TTL_S:
            return found
        found = get_queue(name)
        kept[0] = (now, found)
        return found

    sys_db.dequeue_scopes = scopes
    sys_db.get_queue = queue
    return waiting


class Waiting:
    """Whether a queue has a workflow waiting to start: one statement on a connection of its own, kept
    open by the thread that asks (a pooled checkout, its ping and SQLAlchemy's statement machinery cost
    more than the question: about 1.3 ms of CPU against some 50 µs)."""

    def __init__(self, sys_db: Any, queue_name: str) -> None:
        self._engine = sys_db.engine
        schema = getattr(sys_db, "schema", None)
        table = "workflow_status" if not schema else f'"{schema}".workflow_status'
        statuses = ", ".join(f"'{status}'" for status in WAITING)
        name = queue_name.replace("'", "''")
        self._sql = f"SELECT 1 FROM {table} WHERE queue_name = '{name}' AND status IN ({statuses}) LIMIT 1"
        self._local = threading.local()
        self._opened: list[Any] = []
        self._guard = threading.Lock()

    def any(self) -> bool:
        """True when something waits, and whenever the database does not answer (DBOS's own poll
        then meets the same trouble and reports it)."""
        conn = getattr(self._local, "conn", None)
        try:
            if conn is None:
                conn = self._engine.raw_connection()
                conn.detach()  # its own for as long as the thread asks, out of DBOS's pool
                self._local.conn = conn
                with self._guard:
                    self._opened.append(conn)
            cursor = conn.cursor()
            try:
                cursor.execute(self._sql)
                found = cursor.fetchone() is not None
            finally:
                cursor.close()
            conn.rollback()  # PostgreSQL began a transaction; SQLite has none open
            return found
        except Exception:
            self._local.conn = None
            if conn is not None:
                self._close(conn)
            return True

    def close(self) -> None:
        with self._guard:
            opened, self._opened = self._opened, []
        for conn in opened:
            self._close(conn)

    def _close(self, conn: Any) -> None:
        with self._guard, contextlib.suppress(ValueError):
            self._opened.remove(conn)
        with contextlib.suppress(Exception):
            conn.close()
