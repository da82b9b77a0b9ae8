"""The resource queue of runs: which task of which run waits for a resource, and since when.

A task that found a resource busy waits in ``resource_waits`` with the moment it first asked; the
schedule lets the longest waiter of this installation's running runs take the resource next (first
asked, first served). A task joins or leaves the queue in the same transaction as the move or the
settled attempt that makes it wait or stop waiting (``_queue``), so a crash between two writes can
neither leave a moved-on task in the queue nor a waiting one out of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, select

from tether.store import schema
from tether.store.database import Database, Installation

R = schema.runs
RT = schema.run_tasks
W = schema.resource_waits


class ResourceQueue:
    """The queue's reads and writes, for a run store over ``db`` (mixed into ``SqlRunStore``)."""

    db: Database
    installation: Installation

    def wait_for(self, resources: Sequence[str], run_id: str, task_id: str, since: float) -> None:
        """``task_id`` of ``run_id`` waits for ``resources`` since ``since`` (kept if already waiting)."""
        with self.db.write() as conn:
            self._wait_for(conn, resources, run_id, task_id, since)

    def _wait_for(self, conn: Any, resources: Sequence[str], run_id: str, task_id: str, since: float) -> None:
        for resource in resources:
            mine = (W.c.resource == resource) & (W.c.run_id == run_id) & (W.c.task_id == task_id)
            known = select(W.c.since).where(mine)
            if conn.execute(known).first() is None:
                conn.execute(
                    insert(W),
                    {"resource": resource, "run_id": run_id, "task_id": task_id, "since": since,
                     "installation": self.installation.id},
                )  # fmt: skip

    def _queue(
        self, conn: Any, run_id: str, task_id: str, waiting: tuple[Sequence[str], float] | None
    ) -> None:
        """In ``conn``'s transaction: the task waits for ``waiting`` = (resources, since), or for nothing."""
        if waiting is not None:
            self._wait_for(conn, waiting[0], run_id, task_id, waiting[1])
        else:
            conn.execute(delete(W).where(W.c.run_id == run_id, W.c.task_id == task_id))

    def first_waiters(self, resources: Sequence[str]) -> dict[str, tuple[str, str]]:
        """For each of ``resources``, the task of this installation's running runs that has waited for it
        longest: ``(run_id, task_id)``. A waiter keeps its place while its attempt is in flight (running:
        it may find the resource still busy, and must not lose its turn meanwhile); one whose run is no
        longer running, or whose task has moved on, does not count (an outcome or a schedule's move
        changes the task and the queue in one transaction)."""
        if not resources:
            return {}
        query = (
            select(W.c.resource, W.c.run_id, W.c.task_id, W.c.since)
            .join(R, R.c.run_id == W.c.run_id)
            .join(RT, (RT.c.run_id == W.c.run_id) & (RT.c.task_id == W.c.task_id))
            .where(
                W.c.installation == self.installation.id,
                W.c.resource.in_(list(resources)),
                R.c.status == "running",
                RT.c.status.in_(("pending", "running")),
            )
            .order_by(W.c.since, W.c.run_id, W.c.task_id)
        )
        found: dict[str, tuple[str, str]] = {}
        with self.db.read() as conn:
            for row in conn.execute(query):
                found.setdefault(row.resource, (row.run_id, row.task_id))
        return found
