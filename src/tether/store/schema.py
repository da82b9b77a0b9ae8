"""Opening the database and bringing its schema up to date.

Migrations are numbered and applied in order inside ``BEGIN IMMEDIATE``; ``PRAGMA user_version`` holds
the number of the last one applied, so several processes opening one file at once migrate it once.
"""

from __future__ import annotations

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
)


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode with tether's pragmas, migrated to the newest schema."""
    try:
        conn = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store {str(path)!r}: {exc}") from exc
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
    """One connection to one database file, shared by threads; writers take ``BEGIN IMMEDIATE``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn = connect(path)
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
                raise StoreError(f"the store is not writable: {exc}") from exc
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
