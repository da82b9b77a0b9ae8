"""The database behind every store: one URL, SQLAlchemy Core, numbered migrations.

Every database is opened for one installation (a tether home: its id, and the host it runs on): the
stores stamp the rows it creates with it and act by state only on its own rows, so several homes can
share one database (PostgreSQL for several machines, or one SQLite file).

SQLite in the tether home is the default (``sqlite:///<home>/tether.db``): WAL, ``synchronous=NORMAL``,
``busy_timeout``, foreign keys, and ``BEGIN IMMEDIATE`` for writers so that a read-modify-write
transaction never deadlocks against another process. The same stores run on PostgreSQL when the URL
says so (``postgresql+psycopg://…``). Every database error leaves as a ``StoreError`` whose message
says what to do about it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.errors import StoreError

DB_FILE = "tether.db"
DEFAULT_BUSY_TIMEOUT_S = 10.0


INSTALLATION_RE = re.compile(r"^[0-9a-f]{16}$")
INSTALLATION_OPTION = "tether_installation"  # on a write transaction's connection: whose rows it writes
# In a write transaction's connection's info: what its writer left to do last, just before the commit
# (``events.append_event``: the transaction's events, in one statement). Dropped when it fails.
BEFORE_COMMIT = "tether_before_commit"


@dataclass(frozen=True, slots=True, kw_only=True)
class Installation:
    """The tether home a database is opened for, as its rows name it: ``id`` (unique across hosts)
    decides what is whose; ``host`` is the home's node — the host's name, or ``[cluster] node`` when
    several homes on several hosts form one installation (a cluster: ``tether cluster join``). Runs,
    threads and the rest are the installation's; a job is its node's too, because its worker, files and
    lock live in that node's home (``owns_here``)."""

    id: str
    host: str

    @classmethod
    def here(cls, installation_id: str, node: str = "") -> Installation:
        if not INSTALLATION_RE.match(installation_id):
            raise StoreError(f"an installation id is 16 hex digits, not {installation_id!r}")
        return cls(id=installation_id, host=node or socket.gethostname() or "unknown host")

    def owns(self, installation_id: str | None) -> bool:
        return installation_id == self.id

    def owns_here(self, installation_id: str | None, host: str | None) -> bool:
        """Whether a row that lives in a home (a job: its worker, files and lock) is this node's."""
        return installation_id == self.id and host == self.host

    def values(self) -> dict[str, str]:
        """The owner columns of a row this installation creates."""
        return {"installation": self.id, "host": self.host}


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def default_url(home: Path) -> str:
    return sqlite_url(home / DB_FILE)


def describe(where: str, exc: BaseException, *, folder: Path | None = None) -> str:
    """One sentence a person can act on, for a database error. ``folder``: where a SQLite store lives,
    to tell a full disk (SQLite says only "disk I/O error" when it cannot grow its shared memory)."""
    orig = getattr(exc, "orig", None) or exc
    text = " ".join(str(orig).split())[:300]
    lowered = text.lower()
    if folder is not None and "disk i/o error" in lowered and disk_full(folder):
        return full_disk(where, folder)
    if "not a database" in lowered or "malformed" in lowered:
        return f"the store {where} is damaged or not a tether database ({text}); move it away to start afresh"
    if "locked" in lowered or "busy" in lowered or "could not obtain lock" in lowered:
        return f"the store {where} is busy: another process holds a write lock ({text}); try again"
    if "readonly" in lowered or "read-only" in lowered:
        return f"the store {where} is read-only here ({text})"
    if "full" in lowered or "no space" in lowered:
        return f"the disk holding the store {where} is full ({text})"
    if "unable to open" in lowered or "connection refused" in lowered or "could not connect" in lowered:
        return f"the store {where} cannot be opened ({text})"
    return f"the store {where} failed: {text}"


# What a PostgreSQL server says when it cannot take a connection for now (SQLSTATE 53300, 57P03). A
# server that is not there at all is said at once: a person's command should not wait on it.
_REFUSED_FOR_NOW = (
    "too many clients", "too many connections", "remaining connection slots", "starting up",
    "shutting down", "in recovery",
)  # fmt: skip


def refused_for_now(exc: BaseException) -> bool:
    """Whether a connection failed because the server is busy or restarting (worth asking again)."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    return any(words in text for words in _REFUSED_FOR_NOW)


FULL_BELOW_BYTES = 256 * 1024  # less room than this for a SQLite store and its WAL is a full disk


def disk_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < FULL_BELOW_BYTES
    except OSError:
        return False


def full_disk(where: str, folder: Path) -> str:
    try:
        free = f"{shutil.disk_usage(folder).free // 1024} KB free"
    except OSError:
        free = "no room"
    return f"the disk holding the store {where} is full ({free}): free some space and try again"


class Database:
    """One database, shared by threads, opened for the installation ``installation`` (the home's id,
    ``tether.installation.installation_id``). ``write()`` and ``read()`` hand out a connection inside a
    transaction; the migrations have run before the constructor returns."""

    def __init__(
        self,
        url: str,
        *,
        installation: str,
        node: str = "",
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    ) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        self.installation = Installation.here(installation, node)
        self.url = url
        self.busy_timeout_s = busy_timeout_s
        try:
            from sqlalchemy.engine import make_url

            parsed = make_url(url)
        except ArgumentError as exc:
            raise StoreError(f"the database URL {url!r} is not valid: {exc}") from exc
        self.dialect = parsed.get_backend_name()
        self.where = repr(parsed.database) if self.dialect == "sqlite" else parsed.render_as_string()
        options: dict[str, Any] = {}
        if self.dialect == "sqlite":
            path = Path(parsed.database or "")
            if not parsed.database or parsed.database == ":memory:":
                raise StoreError("tether needs a SQLite file, not an in-memory database")
            _create_private(path)
            options["connect_args"] = {"timeout": busy_timeout_s, "check_same_thread": False}
        elif self.dialect == "postgresql":
            # No pre-ping on every checkout (a round trip a transaction): ``ping_when_idle`` below.
            options["connect_args"] = postgres_connect_args(busy_timeout_s)
        else:
            raise StoreError(f"tether stores run on SQLite or PostgreSQL, not {self.dialect!r} ({url!r})")
        try:
            self.engine = create_engine(parsed, **options)
        except NoSuchModuleError as exc:
            raise StoreError(
                f"no driver for {url!r}: install it (for PostgreSQL: pip install 'tether[postgres]')"
            ) from exc
        self._lock = threading.Lock()
        self._closers: list[Callable[[], None]] = []
        # What a higher layer keeps open beside this database, by name (a DBOS client): closed with it
        self.attached: dict[str, Any] = {}
        self._writer: Any = threading.RLock() if self.dialect == "sqlite" else contextlib.nullcontext()
        if self.dialect == "sqlite":
            _sqlite_sessions(self.engine, busy_timeout_s)
        elif self.dialect == "postgresql":
            ping_when_idle(self.engine)

        from tether.store.migrations import migrate

        database = parsed.database or ""
        self.folder = Path(database).parent if self.dialect == "sqlite" else None
        self.full: str | None = None  # why this store is read-only (a full disk), or None
        try:
            with self.write() as conn:
                migrate(conn, self.dialect, self.installation.values())
        except StoreError:
            if self.folder is None or not disk_full(self.folder) or not _up_to_date(Path(database)):
                self.engine.dispose()
                raise
            self._read_only(Path(database))
        except BaseException:
            self.engine.dispose()
            raise

    def _read_only(self, path: Path) -> None:
        """The disk is full: SQLite cannot make room for the shared memory even a reader of a WAL store
        needs. What was last saved is read from the file as it is (``immutable``); every write says the
        disk is full. (A write that a crash left in the WAL, never folded into the file, is not seen.)"""
        from sqlalchemy import create_engine

        assert self.folder is not None
        self.engine.dispose()
        self.full = full_disk(self.where, self.folder)
        self.engine = create_engine(
            f"sqlite:///file:{path}?mode=ro&immutable=1&uri=true", connect_args={"check_same_thread": False}
        )

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    def _connect(self) -> Any:
        """A connection from the pool. On PostgreSQL, a server that refuses one for now (all its slots
        taken, starting up, shutting down) is asked again with growing pauses for up to the busy timeout:
        a busy moment of a shared server costs a wait, not a failed run."""
        from sqlalchemy.exc import OperationalError

        deadline = time.monotonic() + self.busy_timeout_s
        pause = 0.05
        while True:
            try:
                return self.engine.connect()
            except OperationalError as exc:
                if self.dialect != "postgresql" or not refused_for_now(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    @contextmanager
    def write(self) -> Iterator[Any]:
        """A connection in a write transaction (``BEGIN IMMEDIATE`` on SQLite), committed on success."""
        from sqlalchemy.exc import DBAPIError, SQLAlchemyError

        if self.full is not None:
            raise StoreError(self.full)
        try:
            # SQLite: one writer at a time in this process. Connections that contend for the file's
            # lock wait in SQLite's busy handler, which sleeps in growing steps (up to 100 ms) — a
            # mutex hands the turn over at once. Other processes still meet the busy timeout.
            with self._writer, self._connect() as conn:
                conn = conn.execution_options(
                    tether_write=True, **{INSTALLATION_OPTION: self.installation.id}
                )
                with conn.begin():
                    try:
                        yield conn
                        last = conn.info.pop(BEFORE_COMMIT, None)
                        if last is not None:
                            last(conn)
                    finally:
                        conn.info.pop(BEFORE_COMMIT, None)
        except DBAPIError as exc:
            raise StoreError(describe(self.where, exc, folder=self.folder)) from exc
        except SQLAlchemyError as exc:
            raise StoreError(describe(self.where, exc, folder=self.folder)) from exc

    @contextmanager
    def read(self) -> Iterator[Any]:
        from sqlalchemy.exc import DBAPIError, SQLAlchemyError

        try:
            with self._connect() as conn, conn.begin():
                yield conn
        except DBAPIError as exc:
            raise StoreError(describe(self.where, exc, folder=self.folder)) from exc
        except SQLAlchemyError as exc:
            raise StoreError(describe(self.where, exc, folder=self.folder)) from exc

    def on_close(self, closer: Callable[[], None]) -> None:
        """Have ``closer`` run when this database closes (what a higher layer keeps open beside it)."""
        self._closers.append(closer)

    def close(self) -> None:
        closers, self._closers = self._closers, []
        for closer in reversed(closers):
            with contextlib.suppress(Exception):
                closer()
        self.engine.dispose()


def _sqlite_sessions(engine: Any, busy_timeout_s: float) -> None:
    """Every SQLite connection in WAL mode with foreign keys and tether's busy timeout; a write
    transaction begins ``IMMEDIATE`` (it takes the file's write lock at once, never midway)."""
    from sqlalchemy import event

    timeout_ms = int(busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi: Any, record: Any) -> None:
        dbapi.isolation_level = None  # we say BEGIN ourselves, below
        cursor = dbapi.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {timeout_ms}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get("tether_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


# A session that sits inside a transaction this long is ended by the server, its locks released. tether's
# transactions last milliseconds; one left open is a client cut off between two statements.
IDLE_IN_TRANSACTION_S = 15.0


def postgres_connect_args(timeout_s: float) -> dict[str, Any]:
    """How tether connects to PostgreSQL (its store's and DBOS's connections alike). Both ends notice a
    peer that vanished (a dropped link) within seconds, not TCP's hours: on the client, a connection stuck
    on it would hold up whatever waits for it (heartbeats, stops); on the server, a session cut off in
    the middle of a transaction would keep its row locks, and a host that takes the lost one's work over
    would wait on them (a job's record it settles) — so the server ends a session idle inside a
    transaction after ``IDLE_IN_TRANSACTION_S`` and probes idle clients too."""
    server = (
        f"-c idle_in_transaction_session_timeout={int(IDLE_IN_TRANSACTION_S * 1000)} "
        "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3"
    )
    return {
        "connect_timeout": max(1, int(timeout_s)), "keepalives": 1, "keepalives_idle": 5,
        "keepalives_interval": 2, "keepalives_count": 3, "tcp_user_timeout": 15_000, "options": server,
    }  # fmt: skip


# A pooled PostgreSQL connection unused for this long is pinged before it is handed out again.
PING_IDLE_S = 2.0


def ping_when_idle(engine: Any) -> None:
    """Ping a pooled connection before use only when it sat idle (``PING_IDLE_S``): one that went stale
    meanwhile (the server restarted, the link dropped) is replaced before a transaction meets it, while
    a busy store does not pay a round trip per transaction, as SQLAlchemy's ``pool_pre_ping`` would.
    A connection in use notices a dead peer through its TCP keepalives."""
    from sqlalchemy import event
    from sqlalchemy.exc import DisconnectionError

    @event.listens_for(engine, "checkin")
    def _returned(dbapi: Any, record: Any) -> None:
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi: Any, record: Any, proxy: Any) -> None:
        returned = record.info.get("returned_at")
        if returned is None or time.monotonic() - returned < PING_IDLE_S:
            return  # new (it just connected) or fresh from use
        try:
            cursor = dbapi.cursor()
            try:
                cursor.execute("SELECT 1")
            finally:
                cursor.close()
            dbapi.rollback()
        except Exception as exc:  # the pool discards it and connects anew (SQLAlchemy's own protocol)
            raise DisconnectionError(f"a pooled connection went stale: {exc}") from exc


def _up_to_date(path: Path) -> bool:
    """Whether a SQLite store's schema is this tether's (read without SQLite's shared memory)."""
    import sqlite3

    from tether.store.migrations import MIGRATIONS

    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)) as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0]) == len(MIGRATIONS)
    except sqlite3.Error:
        return False


def _create_private(path: Path) -> None:
    """Create the SQLite file owner-only before SQLite opens it (its -wal and -shm copy the mode).

    Never open an existing file this way: closing any descriptor of a database file drops the POSIX
    locks that this process's own SQLite connections hold on it.
    """
    if path.exists():
        if path.is_dir():
            raise StoreError(f"the store {str(path)!r} is a folder, not a database file")
        return
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot create the store {str(path)!r}: {exc.strerror or exc}") from exc
