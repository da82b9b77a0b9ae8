"""The job table: one durable record per execution, visible to every process of every home on the database.

Each job belongs to the installation (tether home) that started it, and records it with its host: its
worker, files and lock are in that home, so only that installation reconciles, settles or prunes it
(``mine``); others see it read-only.

Status changes go through ``transition``, which applies the state machine of ``TaskStatus`` inside one
write transaction (``BEGIN IMMEDIATE`` on SQLite, a row lock on PostgreSQL): two processes reconciling
the same job cannot both win, and a terminal state is never overwritten. Every change of state is also
appended to the event log in the same transaction, so a reader of the stream misses none.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Float, Integer, and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from tether.errors import RunEnded, StoreError
from tether.events import JobStateChanged
from tether.store import fast, schema
from tether.store.artifacts import record_artifacts
from tether.store.database import Database, Installation
from tether.store.events import append_event
from tether.store.runs import RUN_TERMINAL
from tether.tasks.result import TERMINAL, TaskResult, TaskStatus

T = schema.jobs

# Statements built once: SQLAlchemy then compiles each once and only binds values per call (building
# them per call with literal values costs ~0.6 ms a statement in cache-key work alone).
_INSERT = insert(T)
_INSERT_NEW = {  # the row, unless its execution id is on record already
    # (RETURNING says which: a driver's rowcount of an INSERT is not to be trusted, psycopg's is -1)
    "postgresql": pg_insert(T)
    .on_conflict_do_nothing(index_elements=[T.c.execution_id])
    .returning(T.c.execution_id),
    "sqlite": sqlite_insert(T)
    .on_conflict_do_nothing(index_elements=[T.c.execution_id])
    .returning(T.c.execution_id),
}
# The run a call's origin names (``run:<id>``), its row locked until the transaction ends: a cancel
# moves that row, so it either comes first (and the call is refused) or waits for the call's record
# (and then finds the job to stop). Locked as the run's writes lock it (FOR NO KEY UPDATE), not shared:
# an inline call's claim goes on to move the run in the same transaction, and two claims of one wave
# holding it shared would each wait for the other to let go.
_RUN_OF_ORIGIN = (
    select(schema.runs.c.status)
    .where(schema.runs.c.run_id == bindparam("rid"))
    .with_for_update(key_share=True)
)
_BY_ID = select(T).where(T.c.execution_id == bindparam("eid"))
_ID_ONLY = select(T.c.execution_id).where(T.c.execution_id == bindparam("eid"))
_BY_NONCE = select(T.c.execution_id).where(T.c.confirmation == bindparam("nonce"))
_SET_PROCESS = (
    update(T)
    .where(T.c.execution_id == bindparam("eid"), T.c.pid.is_(None) | (T.c.pid != bindparam("new_pid")))
    .values(pid=bindparam("new_pid"), create_time=bindparam("new_ct"), updated_at=bindparam("at"))
)
_BY_ID_LOCKED = _BY_ID.with_for_update()
_NEWEST_FIRST = (T.c.created_at.desc(), T.c.execution_id.desc())
_ACTIVE = (
    select(T)
    .where(T.c.status.in_((TaskStatus.PENDING.value, TaskStatus.RUNNING.value)))
    .order_by(*_NEWEST_FIRST)
    .limit(bindparam("k_limit"))
)
_ACTIVE_HERE = (
    select(T)
    .where(
        T.c.status.in_((TaskStatus.PENDING.value, TaskStatus.RUNNING.value)),
        T.c.installation == bindparam("k_installation"),
        T.c.host == bindparam("k_host"),
    )
    .order_by(*_NEWEST_FIRST)
    .limit(bindparam("k_limit"))
)
_ACTIVE_OF = (
    select(T)
    .where(
        T.c.status.in_((TaskStatus.PENDING.value, TaskStatus.RUNNING.value)),
        T.c.origin == bindparam("k_origin"),
    )
    .order_by(*_NEWEST_FIRST)
    .limit(bindparam("k_limit"))
)
_TRANSITION = (
    update(T)
    .where(T.c.execution_id == bindparam("eid"))
    .values(
        status=bindparam("new_status"),
        message=bindparam("new_message"),
        data=bindparam("new_data"),
        duration_seconds=bindparam("new_duration"),
        updated_at=bindparam("at"),
        ended_at=bindparam("new_ended"),
        exit_code=func.coalesce(bindparam("new_exit", type_=Integer), T.c.exit_code),
        pid=func.coalesce(bindparam("new_pid", type_=Integer), T.c.pid),
        create_time=func.coalesce(bindparam("new_ct", type_=Float), T.c.create_time),
    )
)

# An end in one statement: the job moves only from a status that may reach it (the state machine, as
# ``transition`` checks it after a locked read), and the row comes back as it now is.
# One statement per end, its statuses spelled out (no expanding IN: ``fast.execute`` runs it as compiled).
_END = {
    end: _TRANSITION.where(
        or_(*(T.c.status == s.value for s in TaskStatus if s not in TERMINAL and s.can_reach(end)))
    ).returning(*T.c)
    for end in TERMINAL
}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    execution_id: str
    task_id: str
    caller: str
    status: TaskStatus
    message: str
    data: dict[str, Any]
    params: dict[str, Any]
    resources: tuple[str, ...]
    background: bool
    detached: bool
    pid: int | None
    create_time: float | None
    exit_code: int | None
    duration_seconds: float
    created_at: str
    updated_at: str
    ended_at: str | None
    origin: str | None = None
    starter_pid: int | None = None
    starter_create_time: float | None = None
    confirmation: str | None = None
    confirmed_by: str | None = None
    step_id: str | None = None
    installation: str | None = None  # the home that started it: only that one acts on it
    host: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def to_result(self) -> TaskResult:
        return TaskResult(
            task_id=self.task_id,
            execution_id=self.execution_id,
            status=self.status,
            message=self.message,
            duration_seconds=self.duration_seconds,
            data=dict(self.data),
        )

    @classmethod
    def from_row(cls, row: Any) -> JobRecord:
        m = row._mapping
        return cls(
            execution_id=m["execution_id"],
            task_id=m["task_id"],
            caller=m["caller"],
            status=TaskStatus(m["status"]),
            message=m["message"],
            data=json.loads(m["data"]),
            params=json.loads(m["params"]),
            resources=tuple(json.loads(m["resources"])),
            background=bool(m["background"]),
            detached=bool(m["detached"]),
            pid=m["pid"],
            create_time=m["create_time"],
            exit_code=m["exit_code"],
            duration_seconds=m["duration_seconds"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            ended_at=m["ended_at"],
            origin=m["origin"],
            starter_pid=m["starter_pid"],
            starter_create_time=m["starter_create_time"],
            confirmation=m["confirmation"],
            confirmed_by=m["confirmed_by"],
            step_id=m["step_id"],
            installation=m["installation"],
            host=m["host"],
        )


class ConfirmationUsed(Exception):
    """The confirmation's nonce is already on record: it authorized another execution."""

    def __init__(self, execution_id: str) -> None:
        super().__init__(execution_id)
        self.execution_id = execution_id


class JobStore(Protocol):
    """What the executor and the job manager need from the job table."""

    installation: Installation

    def insert(
        self,
        result: TaskResult,
        *,
        caller: str,
        params: dict[str, Any],
        resources: Sequence[str] = (),
        background: bool = False,
        detached: bool = False,
        origin: str | None = None,
        starter: tuple[int, float] | None = None,
        confirmation: str | None = None,
        confirmed_by: str | None = None,
        step_id: str | None = None,
        if_absent: bool = False,
        also: Callable[[Any], None] | None = None,
    ) -> bool: ...
    def insert_in(
        self,
        conn: Any,
        result: TaskResult,
        *,
        caller: str,
        params: dict[str, Any],
        resources: Sequence[str] = (),
        background: bool = False,
        detached: bool = False,
        origin: str | None = None,
        starter: tuple[int, float] | None = None,
        confirmation: str | None = None,
        confirmed_by: str | None = None,
        step_id: str | None = None,
        if_absent: bool = False,
        also: Callable[[Any], None] | None = None,
    ) -> bool: ...
    def set_process(self, execution_id: str, pid: int, create_time: float) -> None: ...
    def transition(
        self,
        result: TaskResult,
        *,
        exit_code: int | None = None,
        process: tuple[int, float] | None = None,
        also: Callable[[Any, JobRecord], None] | None = None,
        then: Callable[[Any], None] | None = None,
    ) -> JobRecord: ...
    def get(self, execution_id: str) -> JobRecord | None: ...
    def ids_with_prefix(self, prefix: str, limit: int = 5) -> list[str]: ...
    def list(
        self,
        *,
        active: bool = False,
        limit: int = 100,
        origin: str | None = None,
        task_ids: Sequence[str] | None = None,
        before: str | None = None,
        mine: bool = False,
        here: bool = False,
    ) -> list[JobRecord]: ...
    def ended_before(self, cutoff: str, *, keep: int, limit: int) -> list[str]: ...
    def forget(self, execution_ids: Sequence[str]) -> int: ...
    def close(self) -> None: ...


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _refuse_for_an_ended_run(conn: Any, run_id: str) -> None:
    """``RunEnded`` when run ``run_id`` has ended; its row stays locked until the caller's transaction
    ends. A run not on record (a caller's own origin) refuses nothing."""
    found = fast.first(conn, _RUN_OF_ORIGIN, {"rid": run_id})
    if found is not None and found[0] in RUN_TERMINAL:
        raise RunEnded(f"run {run_id} is {found[0]}: none of its calls starts any more")


class SqlJobStore:
    """The job table of one database (SQLite or PostgreSQL), safe to share between threads."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.installation = db.installation

    def close(self) -> None:
        self.db.close()

    def insert(
        self,
        result: TaskResult,
        *,
        caller: str,
        params: dict[str, Any],
        resources: Sequence[str] = (),
        background: bool = False,
        detached: bool = False,
        origin: str | None = None,
        starter: tuple[int, float] | None = None,
        confirmation: str | None = None,
        confirmed_by: str | None = None,
        step_id: str | None = None,
        if_absent: bool = False,
        also: Callable[[Any], None] | None = None,
    ) -> bool:
        """Insert the job's first record. False when ``if_absent`` and the id is already on record;
        ``ConfirmationUsed`` when ``confirmation`` authorized another execution; ``RunEnded`` when
        ``origin`` is a run (``run:<id>``) that has ended (cancelled, failed, completed): none of its
        calls starts after that, however late its attempt gets here (a twin's record is still found).
        ``also(conn)``: the caller's own writes, in the same transaction as the insert (not run when
        nothing was inserted)."""
        with self.db.write() as conn:
            return self.insert_in(
                conn, result, caller=caller, params=params, resources=resources, background=background,
                detached=detached, origin=origin, starter=starter, confirmation=confirmation,
                confirmed_by=confirmed_by, step_id=step_id, if_absent=if_absent, also=also, open_run=True,
            )  # fmt: skip

    def insert_in(
        self,
        conn: Any,
        result: TaskResult,
        *,
        caller: str,
        params: dict[str, Any],
        resources: Sequence[str] = (),
        background: bool = False,
        detached: bool = False,
        origin: str | None = None,
        starter: tuple[int, float] | None = None,
        confirmation: str | None = None,
        confirmed_by: str | None = None,
        step_id: str | None = None,
        if_absent: bool = False,
        also: Callable[[Any], None] | None = None,
        open_run: bool = False,
    ) -> bool:
        """``insert`` in ``conn``'s write transaction (an inline call claimed in its caller's own, which
        holds its run's row already). ``open_run``: refuse a call of an ended run, as ``insert`` does."""
        stamp = now()
        row = {
            "execution_id": result.execution_id,
            "task_id": result.task_id,
            "caller": caller,
            "status": result.status.value,
            "message": result.message,
            "data": _dumps(result.data),
            "params": _dumps(params),
            "resources": json.dumps(list(resources)),
            "background": int(background),
            "detached": int(detached),
            "pid": None,
            "create_time": None,
            "exit_code": None,
            "duration_seconds": result.duration_seconds,
            "created_at": stamp,
            "updated_at": stamp,
            "ended_at": stamp if result.status in TERMINAL else None,
            "origin": origin,
            "starter_pid": None if starter is None else starter[0],
            "starter_create_time": None if starter is None else starter[1],
            "confirmation": confirmation,
            "confirmed_by": confirmed_by,
            "step_id": step_id,
            **self.installation.values(),
        }
        if if_absent and confirmation is None:  # one statement: inserted, or the id was taken
            if fast.first(conn, _INSERT_NEW[conn.dialect.name], row) is None:
                return False
        else:
            if if_absent and conn.execute(_ID_ONLY, {"eid": result.execution_id}).first():
                return False
            if confirmation is not None:
                used = conn.execute(_BY_NONCE, {"nonce": confirmation}).first()
                if used is not None:
                    raise ConfirmationUsed(used[0])
            conn.execute(_INSERT, row)
        if open_run and origin is not None and origin.startswith("run:") and result.status not in TERMINAL:
            _refuse_for_an_ended_run(conn, origin[len("run:") :])  # before the events' lock, as run writes
        if also is not None:  # before the job's event: see ``_ORDER``
            also(conn)
        _changed(conn, result, origin, step_id, self.installation.values(), background)
        return True

    def set_process(self, execution_id: str, pid: int, create_time: float) -> None:
        with self.db.write() as conn:
            conn.execute(
                _SET_PROCESS, {"eid": execution_id, "new_pid": pid, "new_ct": create_time, "at": now()}
            )

    def transition(
        self,
        result: TaskResult,
        *,
        exit_code: int | None = None,
        process: tuple[int, float] | None = None,
        also: Callable[[Any, JobRecord], None] | None = None,
        then: Callable[[Any], None] | None = None,
    ) -> JobRecord:
        """Move the job to ``result`` if the state machine allows it (recording its worker ``process``
        in the same write, when given); returns the record as it now is. ``also(conn, record)``: the
        caller's own writes, in the same transaction, given the record as it now is (``result``'s, or
        the end that came first); ``then(conn)``: more of them, after the job's event."""
        with self.db.write() as conn:
            record, changed = self._transition(conn, result, exit_code, process)
            if also is not None:  # before the job's event: see ``_ORDER``
                also(conn, record)
            if changed is not None:
                _changed(conn, result, *changed)
            if then is not None:
                then(conn)
        return record

    def _transition(
        self, conn: Any, result: TaskResult, exit_code: int | None, process: tuple[int, float] | None
    ) -> tuple[JobRecord, tuple[Any, ...] | None]:
        """The job moved (if it may be); the record as it now is, and what its event needs (None: no
        change to announce)."""
        stamp = now()
        values = {
            "eid": result.execution_id,
            "new_status": result.status.value,
            "new_message": result.message,
            "new_data": _dumps(result.data),
            "new_duration": result.duration_seconds,
            "at": stamp,
            "new_ended": stamp if result.status in TERMINAL else None,
            "new_exit": exit_code,
            "new_pid": None if process is None else process[0],
            "new_ct": None if process is None else process[1],
        }
        if result.status in TERMINAL:  # an end: one statement when the job may still take it
            ended = fast.first(conn, _END[result.status], values)
            if ended is not None:
                return JobRecord.from_row(ended), _announced(ended)
        lookup = _BY_ID if self.db.is_sqlite else _BY_ID_LOCKED
        row = conn.execute(lookup, {"eid": result.execution_id}).first()
        if row is None:
            raise StoreError(f"no job {result.execution_id!r} in the store")
        current = TaskStatus(row._mapping["status"])
        if current in TERMINAL or not current.can_reach(result.status):
            return JobRecord.from_row(row), None
        conn.execute(_TRANSITION, values)
        changed = _announced(row) if result.status is not current else None
        before = JobRecord.from_row(row)  # the record as _TRANSITION left it, without reading it back
        moved = replace(
            before,
            status=result.status,
            message=result.message,
            data=json.loads(values["new_data"]),
            duration_seconds=result.duration_seconds,
            updated_at=stamp,
            ended_at=values["new_ended"],
            exit_code=before.exit_code if exit_code is None else exit_code,
            pid=before.pid if process is None else process[0],
            create_time=before.create_time if process is None else process[1],
        )
        return moved, changed

    def get(self, execution_id: str) -> JobRecord | None:
        with self.db.read() as conn:
            row = conn.execute(_BY_ID, {"eid": execution_id}).first()
        return None if row is None else JobRecord.from_row(row)

    def ids_with_prefix(self, prefix: str, limit: int = 5) -> list[str]:
        """Execution ids that start with ``prefix`` — or end with it: ids are time-ordered, so jobs
        started close together share their first characters and differ in their last ones."""
        where = T.c.execution_id.startswith(prefix, autoescape=True)
        query = select(T.c.execution_id).where(where | T.c.execution_id.endswith(prefix, autoescape=True))
        with self.db.read() as conn:
            return list(conn.execute(query.order_by(T.c.execution_id).limit(limit)).scalars())

    def list(
        self,
        *,
        active: bool = False,
        limit: int = 100,
        origin: str | None = None,
        task_ids: Sequence[str] | None = None,
        before: str | None = None,
        mine: bool = False,
        here: bool = False,
    ) -> list[JobRecord]:
        """Newest first; only pending/running with ``active``, one origin or some tasks if given, only
        this installation's with ``mine`` (and of this node, whose home holds their workers and files,
        with ``here``), and only ids older than ``before`` (the last id of the previous page)."""
        simple = active and task_ids is None and before is None
        if simple and ((here and origin is None) or not (mine or here)):  # statements built once
            statement = _ACTIVE_HERE if here else _ACTIVE if origin is None else _ACTIVE_OF
            values = {"k_origin": origin, "k_limit": limit, "k_installation": self.installation.id,
                      "k_host": self.installation.host}  # fmt: skip
            with self.db.read() as conn:
                return [JobRecord.from_row(row) for row in conn.execute(statement, values)]
        query = select(T)
        if mine or here:
            query = query.where(T.c.installation == self.installation.id)
        if here:
            query = query.where(T.c.host == self.installation.host)
        if active:
            query = query.where(T.c.status.in_((TaskStatus.PENDING.value, TaskStatus.RUNNING.value)))
        if origin is not None:
            query = query.where(T.c.origin == origin)
        if task_ids is not None:
            if not task_ids:
                return []
            query = query.where(T.c.task_id.in_(list(task_ids)))
        if before is not None:
            with self.db.read() as conn:
                anchor = conn.execute(select(T.c.created_at).where(T.c.execution_id == before)).scalar()
            if anchor is not None:
                query = query.where(
                    (T.c.created_at < anchor) | and_(T.c.created_at == anchor, T.c.execution_id < before)
                )
        query = query.order_by(T.c.created_at.desc(), T.c.execution_id.desc()).limit(limit)
        with self.db.read() as conn:
            return [JobRecord.from_row(row) for row in conn.execute(query)]

    def ended_before(self, cutoff: str, *, keep: int, limit: int) -> list[str]:
        """Ids of this node's terminal jobs that ended before ``cutoff`` or beyond its newest ``keep``
        (oldest first). Another installation's, or node's, are its own to count and keep (their folders
        are in their homes)."""
        ended = and_(
            T.c.ended_at.is_not(None),
            T.c.installation == self.installation.id,
            T.c.host == self.installation.host,
        )
        with self.db.read() as conn:
            total = conn.execute(select(func.count()).select_from(T).where(ended)).scalar() or 0
            surplus = max(0, total - keep)
            oldest = select(T.c.execution_id).where(ended).order_by(T.c.ended_at)
            old = conn.execute(oldest.where(T.c.ended_at < cutoff).limit(limit)).scalars()
            ids = list(old)
            if surplus > len(ids):
                extra = conn.execute(oldest.limit(min(surplus, limit))).scalars()
                ids = list(dict.fromkeys([*ids, *extra]))[:limit]
        return ids

    def forget(self, execution_ids: Sequence[str]) -> int:
        """Delete the records of this installation's terminal jobs (retention); live ones, and another
        installation's, are never touched."""
        if not execution_ids:
            return 0
        with self.db.write() as conn:
            result = conn.execute(
                delete(T)
                .where(
                    T.c.execution_id.in_(list(execution_ids)),
                    T.c.ended_at.is_not(None),
                    T.c.installation == self.installation.id,
                    T.c.host == self.installation.host,
                )
                .returning(T.c.execution_id)
            )
            gone = list(result.scalars())
            if gone:  # what other nodes asked of them, and the log tails published for them
                requests = schema.job_requests
                conn.execute(delete(requests).where(requests.c.execution_id.in_(gone)))
            return len(gone)


def _announced(row: Any) -> tuple[Any, ...]:
    """What ``_changed`` needs of a job's row, after the result: its origin, step, owner, background."""
    m = row._mapping
    owner = {"installation": m["installation"], "host": m["host"]}
    return m["origin"], m["step_id"], owner, bool(m["background"])


# _ORDER: a caller's own writes in a job's transaction (``also``) go before the job's event. They lock a
# run's row; the event log's lock is taken last, at the commit (``events.append_event``), the order every
# run write takes them in: the other way round, two such transactions would deadlock on PostgreSQL.
def _changed(
    conn: Any,
    result: TaskResult,
    origin: str | None,
    step_id: str | None,
    owner: dict[str, Any],
    background: bool,
) -> None:
    if result.status is TaskStatus.COMPLETED:  # its files are in the home of the job's installation
        record_artifacts(conn, result, origin, step_id, owner)
    append_event(
        conn,
        JobStateChanged(
            topic=origin or f"job:{result.execution_id}",
            execution_id=result.execution_id,
            task_id=result.task_id,
            status=result.status.value,
            message=result.message[:500],
            step_id=step_id,
            background=background,
        ),
    )
