"""The engine's hot statements on the driver's cursor (``store/fast.py``), on SQLite and PostgreSQL: the
same rows as SQLAlchemy's, by position and by name; the same errors; the same cursor events; a
statement SQLAlchemy must process at run time is left to it; a connection lost mid-transaction is
invalidated and replaced."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Boolean, bindparam, event, insert, literal_column, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from tether.store import fast, schema
from tether.store.database import Database

R = schema.runs
RT = schema.run_tasks
_RUN = {
    "run_id": "r1", "goal": "g", "status": "running", "plan": "{}", "caller": "cli", "segment": 0,
    "plan_version": 0, "message": "", "created_at": "2026-01-01", "updated_at": "2026-01-01",
}  # fmt: skip
BUMP = update(R).where(R.c.run_id == bindparam("rid")).values(rev=R.c.rev + 1).returning(R.c.rev, R.c.goal)
HEAD = select(R.c.run_id, R.c.rev, R.c.segment).where(R.c.run_id == bindparam("rid"))
SOME = select(R.c.run_id).where(R.c.run_id.in_(bindparam("rids", expanding=True)))


def _db(open_db: Callable[[], Database]) -> Database:
    db = open_db()
    with db.write() as conn:
        conn.execute(insert(R), _RUN)
    return db


def test_rows_are_sqlalchemys_by_position_and_by_name(open_db: Callable[[], Database]) -> None:
    db = _db(open_db)
    for rev in (1, 2):
        with db.write() as conn:
            (row,) = fast.execute(conn, BUMP, {"rid": "r1"})
        assert row[0] == rev and row._mapping == {"rev": rev, "goal": "g"}
    with db.read() as conn:
        mine = fast.first(conn, HEAD, {"rid": "r1"})
        theirs = conn.execute(HEAD, {"rid": "r1"}).first()
        assert fast.first(conn, HEAD, {"rid": "ghost"}) is None
    assert tuple(mine) == tuple(theirs) and mine._mapping == dict(theirs._mapping)
    flag = select(literal_column("1", Boolean).label("flag"), R.c.rev).where(R.c.run_id == bindparam("rid"))
    with db.read() as conn:  # values converted as SQLAlchemy converts them (SQLite's 1 is True)
        assert fast.first(conn, flag, {"rid": "r1"}) == conn.execute(flag, {"rid": "r1"}).first()
        assert fast.first(conn, flag, {"rid": "r1"}) == conn.execute(flag, {"rid": "r1"}).first()  # kept
    with db.write() as conn:  # no rows to return: an empty list
        assert fast.execute(conn, update(R).values(message=bindparam("m")), {"m": "x"}) == []
    with db.read() as conn:  # an expanding IN is SQLAlchemy's to run, with the same answer
        assert [tuple(r) for r in fast.execute(conn, SOME, {"rids": ["r1", "r2"]})] == [("r1",)]


def test_a_drivers_error_is_sqlalchemys_and_the_transaction_is_undone(
    open_db: Callable[[], Database],
) -> None:
    db = _db(open_db)
    with pytest.raises(IntegrityError), db.engine.begin() as conn:
        fast.execute(conn, BUMP, {"rid": "r1"})
        fast.execute(conn, insert(R), _RUN)  # the same run id again
    with db.read() as conn:
        assert fast.first(conn, HEAD, {"rid": "r1"})[1] == 0  # the bump went with it


def test_whoever_listens_gets_sqlalchemys_own_execution(
    open_db: Callable[[], Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test that counts statements, a tracer: they see every statement with SQLAlchemy's context (a
    tracer keeps its span there). Without them, the statement never goes through SQLAlchemy."""
    from sqlalchemy.engine import Connection

    db = _db(open_db)
    seen: list[tuple[str, bool]] = []

    def before(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        seen.append((statement.split()[0], context is not None))

    event.listen(db.engine, "before_cursor_execute", before)
    with db.write() as conn:
        fast.execute(conn, BUMP, {"rid": "r1"})
    event.remove(db.engine, "before_cursor_execute", before)
    assert ("UPDATE", True) in seen

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("run by SQLAlchemy")

    with db.write() as conn:
        monkeypatch.setattr(Connection, "execute", refused)
        assert fast.first(conn, BUMP, {"rid": "r1"})[0] == 2
        monkeypatch.undo()


def test_what_sqlalchemy_fills_in_is_left_to_it(open_db: Callable[[], Database]) -> None:
    """Found in review: a column's Python-side default (or onupdate) is SQLAlchemy's to compute; the
    driver's cursor would have written NULL. And a bind whose name SQLAlchemy escapes stays bound on
    SQLite's positional ``?``."""
    from sqlalchemy import Column, Integer, MetaData, String, Table

    db = open_db()
    table = Table(
        "fast_defaults", MetaData(), Column("k", Integer, primary_key=True),
        Column("v", String, default="filled", onupdate="moved"),
    )  # fmt: skip
    with db.write() as conn:
        table.create(conn)
        fast.execute(conn, insert(table), {"k": 1})
        assert conn.execute(select(table.c.v)).scalar_one() == "filled"
        fast.execute(conn, update(table).values(k=bindparam("new")), {"new": 2})
        assert conn.execute(select(table.c.v)).scalar_one() == "moved"
        odd = select(table.c.k).where(table.c.k == bindparam("k(new)"))
        assert [tuple(r) for r in fast.execute(conn, odd, {"k(new)": 2})] == [(2,)]


def test_a_connection_lost_mid_transaction_is_replaced(open_db: Callable[[], Database]) -> None:
    db = _db(open_db)
    if db.is_sqlite:
        pytest.skip("a SQLite file has no connection to lose")
    other = open_db()
    with pytest.raises(DBAPIError) as lost, db.engine.begin() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with other.write() as killer:
            killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        fast.execute(conn, BUMP, {"rid": "r1"})
    assert lost.value.connection_invalidated
    for _ in range(6):  # the pool's connections work again (its default size is 5)
        with db.write() as conn:
            assert fast.first(conn, BUMP, {"rid": "r1"}) is not None
