"""Opening the database and bringing its schema up to date.

Migrations are numbered and applied in order inside ``BEGIN IMMEDIATE``; ``PRAGMA user_version`` holds
the number of the last one applied, so several processes opening one file at once migrate it once.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tether.errors import StoreError

DB_FILE = "tether.db"
BUSY_TIMEOUT_MS = 10_000

MIGRATIONS: tuple[str, ...] = (
    # 1: jobs — one row per execution, sync or background, from any interface.
    """
    CREATE TABLE jobs (
        execution_id     TEXT PRIMARY KEY,
        task_id          TEXT NOT NULL,
        caller           TEXT NOT NULL,
        status           TEXT NOT NULL,
        message          TEXT NOT NULL DEFAULT '',
        data             TEXT NOT NULL DEFAULT '{}',
        params           TEXT NOT NULL DEFAULT '{}',
        resources        TEXT NOT NULL DEFAULT '[]',
        background       INTEGER NOT NULL DEFAULT 0,
        detached         INTEGER NOT NULL DEFAULT 0,
        pid              INTEGER,
        create_time      REAL,
        exit_code        INTEGER,
        duration_seconds REAL NOT NULL DEFAULT 0,
        created_at       TEXT NOT NULL,
        updated_at       TEXT NOT NULL,
        ended_at         TEXT
    );
    CREATE INDEX jobs_status ON jobs(status);
    CREATE INDEX jobs_created ON jobs(created_at);
    """,
    # 2: conversations — threads, their messages, and every step of every turn.
    """
    CREATE TABLE threads (
        thread_id   TEXT PRIMARY KEY,
        title       TEXT NOT NULL DEFAULT '',
        summary     TEXT NOT NULL DEFAULT '',
        folded      INTEGER NOT NULL DEFAULT 0,
        pending     TEXT,
        turns       INTEGER NOT NULL DEFAULT 0,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL
    );
    CREATE TABLE messages (
        thread_id   TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
        seq         INTEGER NOT NULL,
        turn        INTEGER NOT NULL,
        message     TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        PRIMARY KEY (thread_id, seq)
    );
    CREATE TABLE steps (
        step_id     TEXT PRIMARY KEY,
        thread_id   TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
        turn        INTEGER NOT NULL,
        idx         INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        tool        TEXT,
        args        TEXT,
        result      TEXT,
        text        TEXT NOT NULL DEFAULT '',
        created_at  TEXT NOT NULL
    );
    CREATE INDEX steps_thread ON steps(thread_id, turn, idx);
    """,
    # 3: who started a job (its origin and the starter process) and the consent it ran under; a
    # confirmation is usable once, so its nonce is unique.
    """
    ALTER TABLE jobs ADD COLUMN origin TEXT;
    ALTER TABLE jobs ADD COLUMN starter_pid INTEGER;
    ALTER TABLE jobs ADD COLUMN starter_create_time REAL;
    ALTER TABLE jobs ADD COLUMN confirmation TEXT;
    ALTER TABLE jobs ADD COLUMN confirmed_by TEXT;
    CREATE UNIQUE INDEX jobs_confirmation ON jobs(confirmation) WHERE confirmation IS NOT NULL;
    CREATE INDEX jobs_origin ON jobs(origin, created_at);
    """,
)


def describe_error(path: Path, exc: sqlite3.Error) -> str:
    """One sentence a person can act on, for a database error."""
    text = str(exc)
    lowered = text.lower()
    if "not a database" in lowered or "malformed" in lowered:
        return (
            f"the store {str(path)!r} is damaged or not a tether database ({text}); "
            "move it away to start afresh"
        )
    if "locked" in lowered or "busy" in lowered:
        return f"the store {str(path)!r} is busy: another process holds a write lock ({text}); try again"
    if "readonly" in lowered or "read-only" in lowered:
        return f"the store {str(path)!r} is read-only here ({text})"
    if "full" in lowered:
        return f"the disk holding the store {str(path)!r} is full ({text})"
    if "unable to open" in lowered:
        return f"the store {str(path)!r} cannot be opened ({text})"
    return f"the store {str(path)!r} failed: {text}"


def connect(path: Path, busy_timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> sqlite3.Connection:
    """A connection in autocommit mode with tether's pragmas, migrated to the newest schema."""
    if not path.exists():
        # Created owner-only before SQLite opens it; its -wal and -shm files copy these permissions.
        # Never open an existing file this way: closing any descriptor of a database file drops the
        # POSIX locks that this process's own SQLite connections hold on it.
        try:
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        except OSError as exc:
            raise StoreError(f"cannot create the store {str(path)!r}: {exc.strerror or exc}") from None
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn)
    except sqlite3.Error as exc:
        raise StoreError(describe_error(path, exc)) from None
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the migrations this file has not seen; returns the schema version."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StoreError(
            f"the store is at schema {version}, newer than this tether ({len(MIGRATIONS)}): upgrade tether"
        )
    if version == len(MIGRATIONS):
        return version
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have won
        for number in range(version, len(MIGRATIONS)):
            for statement in MIGRATIONS[number].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number + 1}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(MIGRATIONS)


class Database:
    """One connection to one database file, shared by threads; writers take ``BEGIN IMMEDIATE``.

    Every database error leaves as a ``StoreError`` whose message says what to do about it.
    """

    def __init__(self, path: Path, *, busy_timeout_s: float = BUSY_TIMEOUT_MS / 1000) -> None:
        self.path = path
        self._conn = connect(path, busy_timeout_s)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(describe_error(self.path, exc)) from None
            try:
                yield self._conn
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(describe_error(self.path, exc)) from None
            except BaseException:
                self._rollback()
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(describe_error(self.path, exc)) from None

    def _rollback(self) -> None:
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # no transaction left to roll back (SQLite may have ended it itself)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise StoreError(describe_error(self.path, exc)) from None
