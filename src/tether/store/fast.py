"""The engine's hot statements, run on the driver's own cursor inside SQLAlchemy's transaction.

For every statement it runs, SQLAlchemy builds an execution context, processes the parameters and sets
up a result object: on a flow task's records (about ten statements a task, in one transaction) that
machinery cost as much of a worker's CPU as the driver itself (measured on this machine: about 100 µs
of CPU a statement through SQLAlchemy and psycopg, 50 µs on the cursor; in ``python -m bench
cluster``, the workers' CPU per task of a chain fell from 5.1 to 4.1 ms).

``execute`` runs a Core statement that SQLAlchemy compiled (once per dialect and set of parameter
names) on the connection's DBAPI cursor, inside the transaction SQLAlchemy began: the same SQL, with
SQLAlchemy's errors (a driver's error is raised as its ``DBAPIError``; a lost connection is invalidated,
though not the rest of the pool: ``database.ping_when_idle`` replaces those that sat idle). SQLAlchemy
runs the statement itself, as any other, when it needs to at run time (a type that converts the values
it is given, a Python-side default, an expanding ``IN``), outside a transaction, and whenever anyone
listens to the connection's statements or errors (a test that counts them, a tracer, an error hook),
who then see it with SQLAlchemy's own context.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import DBAPIError


class Row(tuple[Any, ...]):
    """A row as the driver gave it, read by position or by name (``_mapping``), as SQLAlchemy's."""

    __slots__ = ()
    _keys: tuple[str, ...] = ()

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(zip(self._keys, self, strict=True))


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    compiled: Any
    positions: tuple[str, ...] | None  # a positional driver's parameter order (SQLite's ``?``)
    # a driver's row → ``Row``; None until the first run names the columns and their types (reading a
    # cursor's description costs as much as the rest of a run: psycopg builds it anew at each read)
    row: Any


_COMPILED: dict[tuple[Any, ...], tuple[Any, _Compiled | None]] = {}
_LOCK = threading.Lock()
_CURSOR = "tether_fast_cursor"
_NO_ROWS = object()  # a statement that returns none (no RETURNING)


def execute(conn: Any, statement: Any, params: dict[str, Any]) -> list[Any]:
    """``conn.execute(statement, params).all()``, for a statement built once (a module's constant or a
    cached builder's: it is compiled once and kept)."""
    compiled = _compiled(conn, statement, params)
    if compiled is None or _watched(conn) or not conn.in_transaction():
        result = conn.execute(statement, params)
        return list(result.all()) if result.returns_rows else []
    values = compiled.compiled.construct_params(params, escape_names=compiled.positions is None)
    args: Any = values if compiled.positions is None else tuple(values[k] for k in compiled.positions)
    cursor = _cursor(conn)
    try:
        cursor.execute(compiled.sql, args)
        row = compiled.row if compiled.row is not None else _named(conn, statement, params, cursor)
        return [] if row is _NO_ROWS else [row(found) for found in cursor.fetchall()]
    except conn.dialect.loaded_dbapi.Error as exc:
        lost = conn.dialect.is_disconnect(exc, conn.connection.dbapi_connection, cursor)
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            compiled.sql, args, exc, conn.dialect.loaded_dbapi.Error, connection_invalidated=lost,
            dialect=conn.dialect, hide_parameters=conn.engine.hide_parameters,
        ) from exc  # fmt: skip


def _watched(conn: Any) -> bool:
    """Whether anyone listens to this connection's statements or errors (a test that counts them, a
    tracer, an error hook): they get SQLAlchemy's own execution, its context and its events."""
    dispatch = conn.dispatch
    return bool(
        dispatch.before_cursor_execute or dispatch.after_cursor_execute or conn.dialect.dispatch.handle_error
    )


def _cursor(conn: Any) -> Any:
    """A cursor of the connection's DBAPI connection, made once and kept with it (in the pool's record
    of it: one thread uses a checked-out connection at a time)."""
    dbapi = conn.connection.dbapi_connection
    kept = conn.connection.info.get(_CURSOR)
    if kept is not None and kept[0] is dbapi and not getattr(kept[1], "closed", False):
        return kept[1]
    cursor = dbapi.cursor()
    conn.connection.info[_CURSOR] = (dbapi, cursor)
    return cursor


def first(conn: Any, statement: Any, params: dict[str, Any]) -> Any:
    """The first row ``execute`` returns, or None."""
    rows = execute(conn, statement, params)
    return rows[0] if rows else None


def _compiled(conn: Any, statement: Any, params: dict[str, Any]) -> _Compiled | None:
    dialect = conn.dialect
    key = _key(conn, statement, params)
    found = _COMPILED.get(key)
    if found is not None and found[0] is statement:
        return found[1]
    compiled = statement.compile(dialect=dialect, column_keys=list(params))
    runs_alone = (
        not compiled.literal_execute_params
        and not compiled.post_compile_params
        and not any(b.expanding for b in compiled.binds.values())
        and all(b.type.dialect_impl(dialect).bind_processor(dialect) is None for b in compiled.binds.values())
        and not compiled.insert_prefetch  # a column's Python-side default SQLAlchemy would fill in
        and not compiled.update_prefetch
    )
    made = None
    if runs_alone:
        positions = tuple(compiled.positiontup) if compiled.positional else None
        made = _Compiled(compiled.string, compiled, positions, None)
    with _LOCK:
        _COMPILED[key] = (statement, made)  # the statement kept: its id is never another's
    return made


def _key(conn: Any, statement: Any, params: dict[str, Any]) -> tuple[Any, ...]:
    dialect = conn.dialect
    return id(statement), dialect.name, dialect.driver, dialect.paramstyle, frozenset(params)


def _named(conn: Any, statement: Any, params: dict[str, Any], cursor: Any) -> Any:
    """How a statement's results become rows: named after its columns as the driver describes them, each
    value converted as SQLAlchemy would for its column's type and the driver's type of it (mostly not
    at all), known from the first results."""
    dialect = conn.dialect
    if cursor.description is None:
        _keep(conn, statement, params, _NO_ROWS)
        return _NO_ROWS
    names = tuple(d[0] for d in cursor.description)
    kind = type("Row", (Row,), {"__slots__": (), "_keys": names})
    columns = list(getattr(statement, "exported_columns", ()))
    convert = [
        columns[i].type.dialect_impl(dialect).result_processor(dialect, d[1]) if i < len(columns) else None
        for i, d in enumerate(cursor.description)
    ]
    row: Any = _converting(kind, convert) if any(convert) else kind
    _keep(conn, statement, params, row)
    return row


def _keep(conn: Any, statement: Any, params: dict[str, Any], row: Any) -> None:
    key = _key(conn, statement, params)
    with _LOCK:
        found = _COMPILED[key][1]
        assert found is not None
        _COMPILED[key] = (statement, _Compiled(found.sql, found.compiled, found.positions, row))


def _converting(kind: type[Row], convert: list[Any]) -> Callable[[Any], Row]:
    def row(found: Any) -> Row:
        return kind(f(value) if f is not None else value for f, value in zip(convert, found, strict=True))

    return row
