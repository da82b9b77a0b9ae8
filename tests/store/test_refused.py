"""A PostgreSQL server that refuses a connection for now (every slot taken: ``too many clients``) costs
a store a wait, not a failure.

Found by the several-hosts bench: eight busy processes on one server ran it out of connections, and the
runs whose store calls met the refusal were failed (the engine gave up on them) instead of waiting for
a slot to come free.

And a pooled connection is pinged only when it sat idle (not before every transaction, a round trip
each): one that went stale meanwhile is still replaced before a transaction meets it."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from tests.conftest import TEST_INSTALLATION
from tether.errors import StoreError
from tether.store.database import Database

# A server's connections, slots and sessions: PostgreSQL only (the shared fixture runs on SQLite too).
pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@pytest.fixture
def limited_url(database_url: str) -> Iterator[str]:
    """``database_url`` as a role that may hold one connection at a time (PostgreSQL only)."""
    import psycopg

    url = make_url(database_url)
    role, password = f"tether_one_{secrets.token_hex(4)}", secrets.token_hex(8)
    admin = psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, password=url.password,
        dbname=url.database, autocommit=True,
    )  # fmt: skip
    from psycopg import sql

    who = sql.Identifier(role)
    admin.execute(
        sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT 1 PASSWORD {}").format(who, sql.Literal(password))
    )
    admin.execute(sql.SQL("GRANT ALL ON DATABASE {} TO {}").format(sql.Identifier(url.database or ""), who))
    admin.execute(sql.SQL("GRANT ALL ON SCHEMA public TO {}").format(who))
    try:
        yield url.set(username=role, password=password).render_as_string(hide_password=False)
    finally:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        admin.execute(sql.SQL("DROP OWNED BY {}").format(who))
        admin.execute(sql.SQL("DROP ROLE {}").format(who))
        admin.close()


def _hold_the_slot(url: str) -> Any:
    import psycopg

    parsed = make_url(url)
    return psycopg.connect(
        host=parsed.host, port=parsed.port or 5432, user=parsed.username, password=parsed.password,
        dbname=parsed.database,
    )  # fmt: skip


def test_a_refused_connection_waits_for_a_free_slot(limited_url: str) -> None:
    db = Database(limited_url, installation=TEST_INSTALLATION, busy_timeout_s=30)
    try:
        db.engine.dispose()  # no pooled connection: the next read must connect
        refused = threading.Event()

        @event.listens_for(db.engine, "handle_error")
        def _seen(context: Any) -> None:
            if "too many connections" in str(context.original_exception):
                refused.set()

        holder = _hold_the_slot(limited_url)
        outcome: list[object] = []

        def read() -> None:
            try:
                with db.read() as conn:
                    outcome.append(conn.execute(text("SELECT 42")).scalar())
            except Exception as exc:  # the failure the test reports
                outcome.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        assert refused.wait(30), "the server never refused the second connection"
        holder.close()  # a slot comes free while the store waits for one
        reader.join(30)
        assert outcome == [42]
    finally:
        db.close()


def test_a_slot_that_never_comes_free_is_said_plainly(limited_url: str) -> None:
    db = Database(limited_url, installation=TEST_INSTALLATION, busy_timeout_s=0.5)
    db.engine.dispose()
    holder = _hold_the_slot(limited_url)
    try:
        with pytest.raises(StoreError, match="too many connections"), db.read():
            pass
    finally:
        holder.close()
        db.close()


def _terminate_pooled(db: Database, admin_url: str) -> int:
    """End, from the server's side, the backends of ``db``'s pooled connections; how many."""
    import psycopg

    with db.read() as conn:
        mine = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
    parsed = make_url(admin_url)
    with psycopg.connect(
        host=parsed.host, port=parsed.port or 5432, user=parsed.username, password=parsed.password,
        dbname=parsed.database, autocommit=True,
    ) as admin:  # fmt: skip
        admin.execute("SELECT pg_terminate_backend(%s)", (mine,))
    return mine


def test_a_pooled_connection_that_went_stale_while_idle_is_replaced(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.store.database as database

    monkeypatch.setattr(database, "PING_IDLE_S", 0.0)  # every connection has sat idle long enough
    db = Database(database_url, installation=TEST_INSTALLATION)
    try:
        gone = _terminate_pooled(db, database_url)  # the server restarted, say, while the pool slept
        with db.read() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != gone
    finally:
        db.close()


def test_a_session_left_inside_a_transaction_is_ended_by_the_server_and_its_locks_freed(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host cut off between two statements of a transaction leaves its session waiting on the server,
    holding its row locks; the host that takes its work over would wait on them for as long as TCP takes
    to give up (hours). Found by the several-hosts partition test: the take-over hung settling the lost
    host's job, whose row the cut host had locked. The server now ends such a session."""
    import tether.store.database as database

    monkeypatch.setattr(database, "IDLE_IN_TRANSACTION_S", 1.0)
    cut_off, taker = (Database(database_url, installation=TEST_INSTALLATION) for _ in range(2))
    try:
        with taker.write() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS held (id INTEGER PRIMARY KEY, v INTEGER)"))
            conn.execute(text("INSERT INTO held VALUES (1, 0)"))
        locked, release = threading.Event(), threading.Event()
        failed: list[BaseException] = []

        def hold() -> None:  # a client that stops talking in the middle of a transaction
            try:
                with cut_off.write() as conn:
                    conn.execute(text("UPDATE held SET v = 1 WHERE id = 1"))
                    locked.set()
                    release.wait(30)
            except Exception as exc:  # the server ended the session under it: its commit fails
                failed.append(exc)

        holder = threading.Thread(target=hold)
        holder.start()
        assert locked.wait(30)
        with taker.write() as conn:  # waits for the lock, then gets it once the server ends the holder
            conn.execute(text("UPDATE held SET v = 2 WHERE id = 1"))
        release.set()
        holder.join(30)
        assert failed, "the idle transaction was not ended"
        with taker.read() as conn:
            assert conn.execute(text("SELECT v FROM held WHERE id = 1")).scalar_one() == 2
    finally:
        cut_off.close()
        taker.close()
