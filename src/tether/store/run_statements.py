"""The statements of the runs' SQL (``runs_sql.py``), built once: SQLAlchemy then compiles each once and
only binds values per call (building a statement per call, and its cache key, was most of the cost of
a write), and the helpers that bind them."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from sqlalchemy import bindparam, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from tether.store import fast, schema
from tether.store.runs import RUN_TERMINAL, TASK_ENDED

R = schema.runs
RT = schema.run_tasks
RA = schema.run_attempts


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def task_row(values: dict[str, Any], at: str) -> dict[str, Any]:
    """A task's fields as columns: JSON fields encoded, ``ended_at`` set when the status ends it."""
    row: dict[str, Any] = {"updated_at": at}
    for key, value in values.items():
        if key in ("diagnostics", "outputs", "overrides"):
            row[key] = dumps(value)
        elif key == "review":
            row[key] = None if value is None else dumps(value)
        else:
            row[key] = value
    if values.get("status") in TASK_ENDED:
        row["ended_at"] = at
    return row


RUN = select(R).where(R.c.run_id == bindparam("rid"))
HEAD = select(*(c for c in R.c if c.name != "plan")).where(R.c.run_id == bindparam("rid"))
HEADS = select(*(c for c in R.c if c.name != "plan")).where(R.c.run_id.in_(bindparam("rids", expanding=True)))
PLAN = select(R.c.plan, R.c.plan_version).where(R.c.run_id == bindparam("rid"))
TASKS = select(RT).where(RT.c.run_id == bindparam("rid")).order_by(RT.c.position)
BUMP = update(R).where(R.c.run_id == bindparam("rid")).values(rev=R.c.rev + 1).returning(R.c.rev)
BUMP_HEAD = BUMP.returning(*(c for c in R.c if c.name not in ("plan", "rev")))  # rev, then the head
# The next revision of a run that has not ended; no row when it has (its statuses spelled out: no
# expanding IN, so the statement stays on the driver's cursor).
BUMP_OPEN = (
    update(R)
    .where(R.c.run_id == bindparam("rid"), *(R.c.status != ended for ended in RUN_TERMINAL))
    .values(rev=R.c.rev + 1)
    .returning(R.c.rev)
)
CHANGED = select(RT).where(RT.c.run_id == bindparam("rid"), RT.c.rev > bindparam("since"))
# The engine's hot statements are built once: building a statement per call (and its cache key) was
# most of the cost of a write.
RID, TID = bindparam("rid"), bindparam("tid")
TASKS_IN = (
    select(RT)
    .where(RT.c.run_id == RID, RT.c.task_id.in_(bindparam("tids", expanding=True)))
    .order_by(RT.c.position)
)
ATTEMPTS_OF = select(RA).where(RA.c.run_id == RID, RA.c.task_id == TID).order_by(RA.c.attempt)
FAILED_ATTEMPTS = select(RA).where(
    RA.c.run_id == RID, RA.c.status.in_(("failed", "stopped", "unknown", "rejected", "not_found"))
)
# The attempt's row, unless it is on record already (a decision replayed after a crash).
ATTEMPT_KEY = [RA.c.run_id, RA.c.task_id, RA.c.attempt]
BEGIN_ATTEMPT = {
    "postgresql": pg_insert(RA).on_conflict_do_nothing(index_elements=ATTEMPT_KEY).returning(RA.c.attempt),
    "sqlite": sqlite_insert(RA).on_conflict_do_nothing(index_elements=ATTEMPT_KEY).returning(RA.c.attempt),
}
START_TASK = (
    update(RT)
    .where(RT.c.run_id == RID, RT.c.task_id == TID)
    .values(
        status="running", attempts=bindparam("n"), started_at=bindparam("at"), updated_at=bindparam("at"),
        message="", rev=bindparam("rev"),
    )
    .returning(*RT.c)
)  # fmt: skip
END_ATTEMPT = (
    update(RA)
    .where(RA.c.run_id == RID, RA.c.task_id == TID, RA.c.attempt == bindparam("n"))
    .values(
        status=bindparam("v_status"), message=bindparam("v_message"), ended_at=bindparam("at"),
        duration_seconds=bindparam("v_duration"),
    )
)  # fmt: skip


@cache
def set_task(columns: tuple[str, ...], only_running: bool, returning: bool = False) -> Any:
    """``UPDATE run_tasks SET <columns>`` for one task (``v_<column>`` parameters), built once per set;
    ``returning``: the row as it now is comes back."""
    where = [RT.c.run_id == RID, RT.c.task_id == TID]
    if only_running:
        where.append(RT.c.status == "running")
    statement = update(RT).where(*where).values({c: bindparam(f"v_{c}") for c in columns})
    return statement.returning(*RT.c) if returning else statement


def task_params(run_id: str, task_id: str, row: dict[str, Any]) -> dict[str, Any]:
    return {"rid": run_id, "tid": task_id, **{f"v_{k}": v for k, v in row.items()}}


ATTEMPTS = select(RA).where(RA.c.run_id == bindparam("rid")).order_by(RA.c.started_at, RA.c.attempt)


def bump_open(conn: Any, run_id: str) -> int | None:
    """``bump``, for a run that has not ended; None (nothing written) when it has."""
    found = fast.first(conn, BUMP_OPEN, {"rid": run_id})
    return int(found[0]) if found is not None else None


def bump(conn: Any, run_id: str) -> int:
    """The run's next revision, for the tasks this write transaction changes (writers serialize on the
    run's row, so revisions commit in order and a reader at revision r has seen every change up to r)."""
    found = fast.first(conn, BUMP, {"rid": run_id})
    return int(found[0]) if found is not None else 0


@cache
def set_status(ends: bool, allowed: tuple[str, ...]) -> Any:
    """``UPDATE runs SET status`` from one of ``allowed`` (the run's id comes back when it moved);
    ``ends``: the run's end time is set too."""
    values = {
        "status": bindparam("v_status"),
        "message": bindparam("v_message"),
        "updated_at": bindparam("at"),
    }
    if ends:
        values["ended_at"] = bindparam("at")
    where = (R.c.run_id == bindparam("rid"), or_(*(R.c.status == s for s in allowed)))
    return update(R).where(*where).values(values).returning(R.c.run_id)


# A new run's row, unless its id is taken (one statement: RETURNING says which); its tasks' rows.
CREATE = {
    "postgresql": pg_insert(R).on_conflict_do_nothing(index_elements=[R.c.run_id]).returning(R.c.run_id),
    "sqlite": sqlite_insert(R).on_conflict_do_nothing(index_elements=[R.c.run_id]).returning(R.c.run_id),
}
# With RETURNING, SQLAlchemy sends a run's tasks as one INSERT … VALUES (…), (…) ("insertmanyvalues");
# without it, psycopg sent one statement per task.
INSERT_TASKS = insert(RT).returning(RT.c.task_id)
