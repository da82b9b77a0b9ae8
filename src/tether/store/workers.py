"""The executors of an installation spread over several hosts, and what they hold.

- ``workers``: one row per executor id (``<node>/<installation>/slot-N``) with the resources it owns,
  its application version and its heartbeat. ``alive`` until it leaves (``stopped``) or falls silent
  for a lease (``lost``: another executor claims it, once, and recovers its work).
- ``resource_leases``: who holds each owned resource and until when. Several workers may own one
  resource; one holds it at a time, renewing with each heartbeat; another takes it only once the hold
  has expired.
- ``job_requests``: what another node asks of a job (a stop) and what the job's node publishes about it
  (the tail of its log), since a job's worker, files and signals are in its node's home only.

Every time here is the database's clock (epoch seconds), never a host's: two hosts whose clocks differ
still agree on who is silent and whose hold has expired.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, insert, or_, select, text, update

from tether.errors import StoreError
from tether.store import schema
from tether.store.database import Database
from tether.tasks.result import TaskStatus

W = schema.workers
L = schema.resource_leases
R = schema.job_requests
J = schema.jobs

ALIVE, STOPPED, LOST = "alive", "stopped", "lost"
ACTIVE_JOBS = (TaskStatus.PENDING.value, TaskStatus.RUNNING.value)
TAIL_CHARS = 8000


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRecord:
    executor_id: str
    node: str
    machine: str
    home: str
    pid: int
    resources: tuple[str, ...]
    version: str
    status: str
    started_at: float
    beat_at: float
    ended_at: float | None
    taken_by: str | None
    silent_s: float  # how long since its last heartbeat, by the database's clock, when read

    def live(self, lease_s: float) -> bool:
        """Alive on record and heard from within a lease (a row of a process that died with no peer of
        its version to claim it stays ``alive``: it is not a live owner)."""
        return self.status == ALIVE and self.silent_s <= lease_s

    @property
    def key(self) -> str:
        """What it holds resources as: one executor id may run under two versions (a host restarted
        by an upgrade), and each incarnation's work is recovered by its own version."""
        return member_key(self.executor_id, self.version)

    @classmethod
    def from_row(cls, row: Any, now: float) -> WorkerRecord:
        m = row._mapping
        return cls(
            executor_id=m["executor_id"], node=m["node"], machine=m["machine"], home=m["home"],
            pid=int(m["pid"]), resources=tuple(json.loads(m["resources"] or "[]")), version=m["version"],
            status=m["status"], started_at=float(m["started_at"]), beat_at=float(m["beat_at"]),
            ended_at=m["ended_at"], taken_by=m["taken_by"], silent_s=max(0.0, now - float(m["beat_at"])),
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "executor_id": self.executor_id, "node": self.node, "machine": self.machine, "pid": self.pid,
            "resources": list(self.resources), "version": self.version, "status": self.status,
            "silent_s": round(self.silent_s, 3), "taken_by": self.taken_by,
        }  # fmt: skip


def live_owners(workers: Sequence[WorkerRecord], resource: str, lease_s: float) -> list[WorkerRecord]:
    """Those of ``workers`` that own ``resource`` and are live (heard from within ``lease_s``)."""
    return [w for w in workers if resource in w.resources and w.live(lease_s)]


def member_key(executor_id: str, version: str) -> str:
    return f"{executor_id}@{version}"


def split_key(key: str) -> tuple[str, str]:
    """(executor id, version) of a holder (executor ids and node names have no ``@``)."""
    executor_id, _, version = key.partition("@")
    return executor_id, version


def _upsert(dialect: str, table: Any, values: dict[str, Any]) -> Any:
    """An insert into ``table`` that can say what to do on a conflict (PostgreSQL's or SQLite's)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    return dialect_insert(table).values(**values)


def _insert_if_absent(dialect: str, values: dict[str, Any]) -> Any:
    return _upsert(dialect, L, values).on_conflict_do_nothing().returning(L.c.holder)


class WorkerTaken(StoreError):
    """Another live executor runs under this executor id (two homes with one node name)."""


class WorkerStore:
    """The cluster tables of one database, for its installation."""

    def __init__(self, db: Database, lease_s: float = 10.0) -> None:
        self.db = db
        self.lease_s = lease_s  # [cluster] lease_s: a row silent longer is no live executor
        self.installation = db.installation
        if db.dialect == "postgresql":
            self._now_sql = "SELECT EXTRACT(EPOCH FROM clock_timestamp())"
        else:
            self._now_sql = "SELECT (julianday('now') - 2440587.5) * 86400.0"

    def now(self, conn: Any | None = None) -> float:
        """The database's clock, epoch seconds."""
        if conn is not None:
            return float(conn.execute(text(self._now_sql)).scalar())
        with self.db.read() as c:
            return float(c.execute(text(self._now_sql)).scalar())

    # -- membership ------------------------------------------------------------------------------

    def join(
        self,
        executor_id: str,
        *,
        machine: str,
        home: str,
        pid: int,
        resources: Sequence[str],
        version: str,
        lease_s: float,
        watch_s: float = 0.0,
    ) -> float:
        """Say this executor is alive; its incarnation (the database's time of the join: each heartbeat
        names it, so that of two processes that joined under one id only the last one beats).
        ``WorkerTaken`` when a live executor of another home, or another machine, runs under the same id
        (its heartbeat younger than ``lease_s``): two homes of the cluster were given one node name.
        The same home's earlier holder is dead (its slot is held here) — unless the host was cloned,
        its home with it: then the row of the same machine and home keeps beating, which ``watch_s``
        (two heartbeats) of looking at it tells."""
        if watch_s > 0:
            self._refuse_a_beating_twin(executor_id, version, machine, home, lease_s, watch_s)
        with self.db.write() as conn:
            now = self.now(conn)
            rows = conn.execute(select(W).where(W.c.executor_id == executor_id)).all()
            values = {
                "installation": self.installation.id, "node": self.installation.host, "machine": machine,
                "home": home, "pid": pid, "resources": json.dumps(sorted(set(resources))),
                "version": version, "status": ALIVE, "started_at": now, "beat_at": now, "ended_at": None,
                "taken_by": None, "recovered_at": None,
            }  # fmt: skip
            for row in rows:
                m = row._mapping
                fresh = m["status"] == ALIVE and now - float(m["beat_at"]) < lease_s
                if fresh and (m["machine"], m["home"]) != (machine, home):
                    raise WorkerTaken(
                        f"executor {executor_id} is alive on machine {m['machine']} (home {m['home']}, pid "
                        f"{m['pid']}, heartbeat {now - float(m['beat_at']):.1f} s ago): give this home a "
                        "node name of its own ([cluster] node in settings.toml, or tether worker --name)"
                    )
            # The same home's earlier incarnation under another version stays on record as it was: if
            # it died holding work, an executor of its version finds it silent and takes the work over.
            if any(row._mapping["version"] == version for row in rows):
                conn.execute(
                    update(W).where(W.c.executor_id == executor_id, W.c.version == version).values(**values)
                )
            else:
                conn.execute(insert(W), {"executor_id": executor_id, **values})
            return now

    def _refuse_a_beating_twin(
        self, executor_id: str, version: str, machine: str, home: str, lease_s: float, watch_s: float
    ) -> None:
        def beat_at() -> float | None:
            with self.db.read() as conn:
                now = self.now(conn)
                row = conn.execute(
                    select(W).where(W.c.executor_id == executor_id, W.c.version == version)
                ).first()
            if (
                row is None
                or row._mapping["status"] != ALIVE
                or now - float(row._mapping["beat_at"]) >= lease_s
            ):
                return None
            return (
                float(row._mapping["beat_at"])
                if (row._mapping["machine"], row._mapping["home"]) == (machine, home)
                else None
            )

        first = beat_at()
        if first is None:
            return
        time.sleep(watch_s)
        later = beat_at()
        if later is not None and later > first:
            raise WorkerTaken(
                f"executor {executor_id} is alive and beating on another host with this machine's name "
                f"({machine}) and this home's path ({home}) — a cloned machine? Give this home a node "
                "name of its own ([cluster] node in settings.toml, or tether worker --name)"
            )

    def beat(
        self,
        executor_id: str,
        version: str,
        resources: Sequence[str],
        lease_s: float,
        incarnation: float | None = None,
    ) -> tuple[bool, tuple[str, ...]]:
        """One heartbeat: (still alive on record, the resources held until ``lease_s`` from now). False
        when another executor found this one silent and took its work over, or another process joined
        under its id since ``incarnation`` (what ``join`` returned): it must stop at once."""
        with self.db.write() as conn:
            now = self.now(conn)
            mine = [W.c.executor_id == executor_id, W.c.version == version, W.c.status == ALIVE]
            if incarnation is not None:
                mine.append(W.c.started_at == incarnation)
            alive = conn.execute(update(W).where(*mine).values(beat_at=now)).rowcount
            if not alive:
                return False, ()
            held = []
            for resource in sorted(set(resources)):
                if self._hold(conn, resource, member_key(executor_id, version), now, now + lease_s):
                    held.append(resource)
            return True, tuple(held)

    def _hold(self, conn: Any, resource: str, holder: str, now: float, until: float) -> bool:
        key = and_(L.c.installation == self.installation.id, L.c.resource == resource)
        renewed = conn.execute(
            update(L).where(key, or_(L.c.holder == holder, L.c.expires_at < now))
            .values(holder=holder, expires_at=until)
        ).rowcount  # fmt: skip
        if renewed:
            return True
        # Nobody held it yet: of several that race to take it first, the key lets exactly one in.
        values = {"installation": self.installation.id, "resource": resource, "holder": holder}
        taken = conn.execute(_insert_if_absent(self.db.dialect, {**values, "expires_at": until}))
        return taken.first() is not None

    def leave(self, executor_id: str, version: str) -> None:
        """This executor stops: its row says so and its holds are released at once."""
        with self.db.write() as conn:
            now = self.now(conn)
            conn.execute(
                update(W).where(W.c.executor_id == executor_id, W.c.version == version, W.c.status == ALIVE)
                .values(status=STOPPED, ended_at=now)
            )  # fmt: skip
            held = member_key(executor_id, version)
            conn.execute(delete(L).where(L.c.installation == self.installation.id, L.c.holder == held))

    def claim_lost(self, by: str, lease_s: float, version: str) -> list[str]:
        """The executors of this installation and ``version`` to take over (their ids): those silent for
        ``lease_s`` (marked ``lost``) and those that stopped with work perhaps left pending (their DBOS is
        gone). Claimed by ``by`` (an executor id of ``version``) in one statement each: of several
        executors that look at once, one claims each, and only the claimer recovers its work. Their
        expired holds are released."""
        claimed = []
        with self.db.write() as conn:
            now = self.now(conn)
            # The silent, and those that stopped (their DBOS is gone): what they held is handed on.
            gone = or_(and_(W.c.status == ALIVE, W.c.beat_at < now - lease_s),
                       and_(W.c.status == STOPPED, W.c.taken_by.is_(None)))  # fmt: skip
            silent = conn.execute(
                select(W.c.executor_id).where(
                    W.c.installation == self.installation.id, W.c.version == version, gone,
                    W.c.executor_id != by,
                )
            ).scalars().all()  # fmt: skip
            for executor_id in silent:
                mine = and_(W.c.executor_id == executor_id, W.c.version == version, gone)
                stopped = conn.execute(select(W.c.status).where(mine)).scalar()
                done = conn.execute(
                    update(W).where(mine)
                    .values(status=LOST if stopped == ALIVE else STOPPED, taken_by=by, recovered_at=None,
                            ended_at=now if stopped == ALIVE else W.c.ended_at)
                ).rowcount  # fmt: skip
                if done:
                    claimed.append(executor_id)
                    mine = L.c.installation == self.installation.id
                    held = member_key(executor_id, version)
                    conn.execute(delete(L).where(mine, L.c.holder == held, L.c.expires_at < now))
            claimed += self._unrecovered(conn, by, version, now, lease_s)
        return claimed

    def _unrecovered(self, conn: Any, by: str, version: str, now: float, lease_s: float) -> list[str]:
        """Claims whose recovery never finished (``mark_recovered``): the claimer's own, and those of a
        claimer that died since — taken again by ``by``, so a claim can never strand the work."""
        live = set(
            conn.execute(
                select(W.c.executor_id).where(W.c.installation == self.installation.id, W.c.status == ALIVE,
                                              W.c.beat_at >= now - lease_s)
            ).scalars()
        )  # fmt: skip
        pending = conn.execute(
            select(W.c.executor_id, W.c.taken_by).where(
                W.c.installation == self.installation.id, W.c.version == version, W.c.status != ALIVE,
                W.c.taken_by.is_not(None), W.c.recovered_at.is_(None),
            )
        ).all()  # fmt: skip
        again = []
        for executor_id, taker in pending:
            if taker != by and taker in live:
                continue  # its claimer lives, and recovers it
            mine = and_(W.c.executor_id == executor_id, W.c.version == version, W.c.taken_by == taker,
                        W.c.recovered_at.is_(None))  # fmt: skip
            if conn.execute(update(W).where(mine).values(taken_by=by)).rowcount:
                again.append(executor_id)
        return sorted(set(again))

    def mark_recovered(self, executor_ids: Sequence[str], version: str) -> None:
        """The work of ``executor_ids`` (of ``version``) is back in its queues: their claims are done."""
        if not executor_ids:
            return
        with self.db.write() as conn:
            now = self.now(conn)
            conn.execute(
                update(W).where(W.c.executor_id.in_(list(executor_ids)), W.c.version == version)
                .values(recovered_at=now)
            )  # fmt: skip

    def workers(self, *, alive_only: bool = False) -> list[WorkerRecord]:
        """This installation's executors, live ones first, then the most recently seen."""
        query = select(W).where(W.c.installation == self.installation.id)
        if alive_only:
            query = query.where(W.c.status == ALIVE)
        with self.db.read() as conn:
            now = self.now(conn)
            rows = conn.execute(query.order_by(W.c.status, W.c.beat_at.desc())).all()
        return [WorkerRecord.from_row(row, now) for row in rows]

    def forget(self, node: str) -> int:
        """Remove the rows of ``node``'s executors that are not alive (an operator retiring a host)."""
        with self.db.write() as conn:
            return int(
                conn.execute(
                    delete(W).where(W.c.installation == self.installation.id, W.c.node == node,
                                    or_(W.c.status != ALIVE, W.c.beat_at < self.now(conn) - self.lease_s))
                ).rowcount or 0
            )  # fmt: skip

    def node_lost(self, node: str) -> tuple[float, set[int]] | None:
        """(how long ``node`` has been silent, the pids of its lost executors), when it is a node of the
        installation whose executors were all lost (None when one lives, or it never ran one: nothing can
        be told of its jobs from here)."""
        with self.db.read() as conn:
            now = self.now(conn)
            rows = conn.execute(
                select(W.c.status, W.c.beat_at, W.c.pid).where(
                    W.c.installation == self.installation.id, W.c.node == node
                )
            ).all()
        if not rows or any(r.status == ALIVE for r in rows) or not any(r.status == LOST for r in rows):
            return None
        return now - max(float(r.beat_at) for r in rows), {int(r.pid) for r in rows if r.status == LOST}

    def node_alive(self, node: str) -> bool:
        """Whether ``node`` has a live executor (one that applies stops asked through the database)."""
        return any(w.node == node and w.live(self.lease_s) for w in self.workers(alive_only=True))

    def holders(self) -> dict[str, tuple[str, float]]:
        """Each held resource: (its holder's ``member_key``, seconds its hold has left; negative: expired)."""
        with self.db.read() as conn:
            now = self.now(conn)
            rows = conn.execute(select(L).where(L.c.installation == self.installation.id)).all()
        return {r.resource: (r.holder, float(r.expires_at) - now) for r in rows}

    # -- requests to a job's node ----------------------------------------------------------------

    def request_stop(self, execution_id: str, reason: str, by: str) -> None:
        with self.db.write() as conn:
            now = self.now(conn)
            values = {"stop_reason": reason[:500], "requested_by": by[:200], "requested_at": now}
            changed = conn.execute(
                update(R).where(R.c.execution_id == execution_id, R.c.stop_reason.is_(None)).values(**values)
            ).rowcount
            if (
                not changed
                and conn.execute(select(R.c.execution_id).where(R.c.execution_id == execution_id)).first()
                is None
            ):
                conn.execute(insert(R), {"execution_id": execution_id, **values})

    def follow(self, execution_id: str) -> None:
        """The caller of a forwarded call says it still waits for it (every second or so, while it does):
        its holder stops the job once the caller has been silent for a lease (``unfollowed``)."""
        with self.db.write() as conn:
            now = self.now(conn)
            upsert = _upsert(self.db.dialect, R, {"execution_id": execution_id, "followed_at": now})
            conn.execute(
                upsert.on_conflict_do_update(index_elements=[R.c.execution_id], set_={"followed_at": now})
            )

    def drop_requests(self, execution_ids: Sequence[str]) -> None:
        """Forget what was asked of calls that never became jobs (their retention goes with their jobs')."""
        with self.db.write() as conn:
            conn.execute(delete(R).where(R.c.execution_id.in_(list(execution_ids))))

    def unfollowed(self, lease_s: float, limit: int = 100) -> list[tuple[str, float]]:
        """(execution id, seconds since its caller last said it waits) of this node's unfinished jobs whose
        callers fell silent for ``lease_s``, and that nobody asked to stop yet."""
        with self.db.read() as conn:
            now = self.now(conn)
            query = (
                select(R.c.execution_id, R.c.followed_at)
                .join(J, J.c.execution_id == R.c.execution_id)
                .where(
                    R.c.followed_at < now - lease_s, R.c.stop_reason.is_(None),
                    J.c.installation == self.installation.id, J.c.host == self.installation.host,
                    J.c.status.in_(ACTIVE_JOBS),
                )
                .limit(limit)
            )  # fmt: skip
            return [(row.execution_id, now - float(row.followed_at)) for row in conn.execute(query)]

    def stops_here(self, limit: int = 100) -> list[tuple[str, str]]:
        """(execution id, reason) of this node's unfinished jobs that another process asked to stop."""
        query = (
            select(R.c.execution_id, R.c.stop_reason)
            .join(J, J.c.execution_id == R.c.execution_id)
            .where(
                R.c.stop_reason.is_not(None), J.c.installation == self.installation.id,
                J.c.host == self.installation.host, J.c.status.in_(ACTIVE_JOBS),
            )
            .limit(limit)
        )  # fmt: skip
        with self.db.read() as conn:
            return [(row.execution_id, row.stop_reason) for row in conn.execute(query)]

    def publish_tail(self, execution_id: str, tail: str) -> None:
        tail = tail[-TAIL_CHARS:]
        with self.db.write() as conn:
            now = self.now(conn)
            changed = conn.execute(
                update(R).where(R.c.execution_id == execution_id).values(log_tail=tail, tail_at=now)
            ).rowcount
            if not changed:
                conn.execute(insert(R), {"execution_id": execution_id, "log_tail": tail, "tail_at": now})

    def tail(self, execution_id: str) -> tuple[str | None, float | None]:
        """The log tail a job's node published, and how many seconds ago (None, None: none yet)."""
        with self.db.read() as conn:
            now = self.now(conn)
            row = conn.execute(
                select(R.c.log_tail, R.c.tail_at).where(R.c.execution_id == execution_id)
            ).first()
        if row is None or row.log_tail is None:
            return None, None
        return row.log_tail, now - float(row.tail_at)
