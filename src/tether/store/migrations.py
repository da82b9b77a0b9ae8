"""The numbered migrations that build the readable record (``schema``'s tables), and how they run.

Migrations are plain SQL that both SQLite and PostgreSQL accept, with two spellings adapted per dialect
(``REAL`` is 8-byte ``DOUBLE PRECISION`` on PostgreSQL, whose ``REAL`` would round a process start time
to minutes; an auto-incrementing key is ``BIGSERIAL``). They run in order inside one write transaction;
``tether_schema`` holds the number of the last one applied (a SQLite file from before that table carries
it in ``PRAGMA user_version``), so several processes opening one database at once migrate it once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from tether.errors import StoreError

# A migration is SQL both dialects take, or, where they differ, {"both", "sqlite", "postgresql"}.
MIGRATIONS: tuple[str | dict[str, str], ...] = (
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
    # 4: one writer per thread (turns, with their owner process), messages keyed by (thread, turn,
    # index) so a replayed append is a no-op, steps recorded as started before they run (with the
    # execution they started), jobs that know their step, and the persisted event stream.
    """
    CREATE TABLE turns (
        thread_id          TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
        turn               INTEGER NOT NULL,
        status             TEXT NOT NULL,
        message            TEXT NOT NULL DEFAULT '',
        final              TEXT NOT NULL DEFAULT '',
        owner_pid          INTEGER,
        owner_create_time  REAL,
        started_at         TEXT NOT NULL,
        ended_at           TEXT,
        PRIMARY KEY (thread_id, turn)
    );
    CREATE INDEX turns_status ON turns(status);
    CREATE TABLE messages_keyed (
        thread_id   TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
        turn        INTEGER NOT NULL,
        idx         INTEGER NOT NULL,
        seq         INTEGER NOT NULL,
        message     TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        PRIMARY KEY (thread_id, turn, idx)
    );
    INSERT INTO messages_keyed (thread_id, turn, idx, seq, message, created_at)
        SELECT m.thread_id, m.turn,
               m.seq - (SELECT MIN(o.seq) FROM messages o
                        WHERE o.thread_id = m.thread_id AND o.turn = m.turn),
               m.seq, m.message, m.created_at
        FROM messages m;
    DROP TABLE messages;
    ALTER TABLE messages_keyed RENAME TO messages;
    CREATE UNIQUE INDEX messages_seq ON messages(thread_id, seq);
    ALTER TABLE steps ADD COLUMN status TEXT NOT NULL DEFAULT 'finished';
    ALTER TABLE steps ADD COLUMN execution_id TEXT;
    ALTER TABLE steps ADD COLUMN updated_at TEXT;
    ALTER TABLE steps ADD COLUMN call_id TEXT;
    ALTER TABLE jobs ADD COLUMN step_id TEXT;
    CREATE INDEX jobs_ended ON jobs(ended_at);
    CREATE TABLE events (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        ts       REAL NOT NULL,
        kind     TEXT NOT NULL,
        topic    TEXT NOT NULL,
        payload  TEXT NOT NULL
    );
    CREATE INDEX events_topic ON events(topic, id);
    """,
    # 5: supervisor runs — the readable record of a goal or flow run: its plan, its tasks with their
    # state, attempts (each one execution), pending reviews and outputs. DBOS keeps the recovery log.
    """
    CREATE TABLE runs (
        run_id      TEXT PRIMARY KEY,
        goal        TEXT NOT NULL DEFAULT '',
        status      TEXT NOT NULL,
        plan        TEXT NOT NULL,
        caller      TEXT NOT NULL,
        segment     INTEGER NOT NULL DEFAULT 0,
        plan_version INTEGER NOT NULL DEFAULT 0,
        message     TEXT NOT NULL DEFAULT '',
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL,
        ended_at    TEXT
    );
    CREATE INDEX runs_created ON runs(created_at);
    CREATE INDEX runs_status ON runs(status);
    CREATE TABLE run_tasks (
        run_id      TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        task_id     TEXT NOT NULL,
        position    INTEGER NOT NULL,
        status      TEXT NOT NULL,
        attempts    INTEGER NOT NULL DEFAULT 0,
        iterations  INTEGER NOT NULL DEFAULT 0,
        message     TEXT NOT NULL DEFAULT '',
        diagnostics TEXT NOT NULL DEFAULT '{}',
        outputs     TEXT NOT NULL DEFAULT '{}',
        review      TEXT,
        overrides   TEXT NOT NULL DEFAULT '{}',
        started_at  TEXT,
        ended_at    TEXT,
        updated_at  TEXT NOT NULL,
        PRIMARY KEY (run_id, task_id)
    );
    CREATE TABLE run_attempts (
        run_id           TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        task_id          TEXT NOT NULL,
        attempt          INTEGER NOT NULL,
        execution_id     TEXT NOT NULL,
        status           TEXT NOT NULL,
        message          TEXT NOT NULL DEFAULT '',
        how              TEXT NOT NULL DEFAULT '{}',
        started_at       TEXT NOT NULL,
        ended_at         TEXT,
        duration_seconds REAL NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, task_id, attempt)
    );
    CREATE UNIQUE INDEX run_attempts_execution ON run_attempts(execution_id);
    """,
    # 6: a revision per run, bumped by every write that changes one of its tasks and stamped on the
    # tasks it changed: the engine reads only what changed since its last decision, not every task.
    """
    ALTER TABLE runs ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE run_tasks ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX run_tasks_rev ON run_tasks(run_id, rev);
    """,
    # 7: the ids of deleted threads, never given out again: a thread's execution ids and question ids
    # derive from (thread, turn, step), so a new thread under an old id would adopt the old one's results
    # and answer its questions.
    """
    CREATE TABLE deleted_threads (
        thread_id  TEXT PRIMARY KEY,
        deleted_at TEXT NOT NULL
    );
    """,
    # 8: generated files (md, html, pptx, pdf) with the thread, step and execution that made them. Per
    # origin and format only the newest is offered: an older one is marked superseded and its file goes.
    """
    CREATE TABLE artifacts (
        artifact_id   INTEGER PRIMARY KEY AUTOINCREMENT,
        origin        TEXT,
        thread_id     TEXT,
        step_id       TEXT,
        execution_id  TEXT NOT NULL,
        format        TEXT NOT NULL,
        name          TEXT NOT NULL,
        path          TEXT NOT NULL,
        size          INTEGER NOT NULL,
        created_at    TEXT NOT NULL,
        superseded_at TEXT
    );
    CREATE INDEX artifacts_origin ON artifacts(origin, format);
    CREATE INDEX artifacts_thread ON artifacts(thread_id);
    CREATE INDEX artifacts_superseded ON artifacts(superseded_at);
    """,
    # 9: the installation (tether home) that owns a row, and the host it runs on. Homes on one database
    # decide, recover, settle and prune only their own jobs, runs, attempts, turns and files: another's
    # processes and files are out of their sight (another host, or another PID namespace). The rows
    # already there are the migrating home's (the one home that used the database so far).
    """
    ALTER TABLE jobs ADD COLUMN installation TEXT;
    ALTER TABLE jobs ADD COLUMN host TEXT;
    ALTER TABLE runs ADD COLUMN installation TEXT;
    ALTER TABLE runs ADD COLUMN host TEXT;
    ALTER TABLE run_attempts ADD COLUMN installation TEXT;
    ALTER TABLE run_attempts ADD COLUMN host TEXT;
    ALTER TABLE turns ADD COLUMN installation TEXT;
    ALTER TABLE turns ADD COLUMN host TEXT;
    ALTER TABLE artifacts ADD COLUMN installation TEXT;
    ALTER TABLE artifacts ADD COLUMN host TEXT;
    UPDATE jobs SET installation = :installation, host = :host;
    UPDATE runs SET installation = :installation, host = :host;
    UPDATE run_attempts SET installation = :installation, host = :host;
    UPDATE turns SET installation = :installation, host = :host;
    UPDATE artifacts SET installation = :installation, host = :host;
    CREATE INDEX jobs_installation ON jobs(installation, status);
    CREATE INDEX jobs_installation_ended ON jobs(installation, ended_at);
    CREATE INDEX runs_installation ON runs(installation, status);
    CREATE INDEX turns_installation ON turns(installation, status);
    CREATE INDEX artifacts_installation ON artifacts(installation, superseded_at);
    """,
    # 10: the installation that wrote an event: every home reads the whole log, and each one's retention
    # counts and removes only its own events (the events already there are the migrating home's).
    """
    ALTER TABLE events ADD COLUMN installation TEXT;
    UPDATE events SET installation = :installation;
    CREATE INDEX events_installation ON events(installation, id);
    """,
    # 11: tasks that wait for a busy resource, so that they take it in the order they asked for it.
    """
    CREATE TABLE resource_waits (
        resource     TEXT NOT NULL,
        run_id       TEXT NOT NULL,
        task_id      TEXT NOT NULL,
        since        REAL NOT NULL,
        installation TEXT NOT NULL,
        PRIMARY KEY (resource, run_id, task_id)
    );
    CREATE INDEX resource_waits_order ON resource_waits(installation, resource, since);
    """,
    # 12: a team of agents. An agent is a named persona with its model and its tool grants; a thread
    # belongs to one (NULL: the default assistant), and a delegated thread names the step that asked.
    """
    CREATE TABLE agents (
        name        TEXT PRIMARY KEY,
        description TEXT NOT NULL DEFAULT '',
        persona     TEXT NOT NULL DEFAULT '',
        model       TEXT,
        language    TEXT,
        grants      TEXT NOT NULL DEFAULT '[]',
        aliases     TEXT NOT NULL DEFAULT '[]',
        memory      TEXT NOT NULL DEFAULT 'on',
        channel     TEXT,
        created_at  TEXT NOT NULL,
        updated_at  TEXT NOT NULL
    );
    ALTER TABLE threads ADD COLUMN agent TEXT;
    ALTER TABLE threads ADD COLUMN parent TEXT;
    CREATE INDEX threads_parent ON threads(parent);
    """,
    # 13: dialogue memory (``store/memories.py``): finished turns and noted facts, per installation and
    # agent, found by their terms (FTS5 on SQLite; a tsvector with a GIN index on PostgreSQL). A thread
    # may be private: nothing from it is remembered.
    {
        "both": """
        CREATE TABLE memories (
            id           INTEGER PRIMARY KEY AUTOINCREMENT,
            installation TEXT NOT NULL,
            agent        TEXT NOT NULL,
            kind         TEXT NOT NULL,
            thread_id    TEXT,
            turn         INTEGER,
            said_at      TEXT NOT NULL,
            text         TEXT NOT NULL,
            terms        TEXT NOT NULL,
            created_at   TEXT NOT NULL
        );
        CREATE INDEX memories_owner ON memories(installation, agent, kind);
        CREATE INDEX memories_thread ON memories(thread_id, turn);
        ALTER TABLE threads ADD COLUMN private INTEGER NOT NULL DEFAULT 0;
        """,
        "sqlite": """
        CREATE VIRTUAL TABLE memory_terms USING fts5(terms, tokenize = 'unicode61 remove_diacritics 0');
        CREATE VIRTUAL TABLE memory_vocab USING fts5vocab(memory_terms, 'row');
        """,
        "postgresql": """
        ALTER TABLE memories ADD COLUMN tsv tsvector;
        CREATE INDEX memories_tsv ON memories USING GIN (tsv);
        """,
    },  # 14: initiative (``store/initiative.py``): every signal an agent weighed and what it decided (with
    # the proactive message it posted and the person's rating), each agent's threshold as ratings move
    # it, the notification channels (their addresses are secrets: in the keyring, not here) and their
    # outbox, and how far the event log has been read for them.
    """
    CREATE TABLE decisions (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        installation TEXT NOT NULL,
        agent        TEXT NOT NULL,
        signal_key   TEXT,
        kind         TEXT NOT NULL,
        signal       TEXT NOT NULL,
        fired        INTEGER NOT NULL,
        category     TEXT NOT NULL,
        score        REAL NOT NULL,
        threshold    REAL NOT NULL,
        reason       TEXT NOT NULL,
        decided_by   TEXT NOT NULL,
        thread_id    TEXT,
        turn         INTEGER,
        message      TEXT,
        rating       INTEGER,
        rating_note  TEXT,
        rated_at     TEXT,
        created_at   TEXT NOT NULL
    );
    CREATE UNIQUE INDEX decisions_signal ON decisions(installation, signal_key);
    CREATE INDEX decisions_agent ON decisions(installation, agent, created_at);
    CREATE TABLE thresholds (
        installation TEXT NOT NULL,
        agent        TEXT NOT NULL,
        threshold    REAL NOT NULL,
        updated_at   TEXT NOT NULL,
        PRIMARY KEY (installation, agent)
    );
    CREATE TABLE channels (
        installation TEXT NOT NULL,
        name         TEXT NOT NULL,
        scheme       TEXT NOT NULL,
        events       TEXT NOT NULL,
        created_at   TEXT NOT NULL,
        PRIMARY KEY (installation, name)
    );
    CREATE TABLE notifications (
        id           INTEGER PRIMARY KEY AUTOINCREMENT,
        installation TEXT NOT NULL,
        channel      TEXT NOT NULL,
        event        TEXT NOT NULL,
        source_key   TEXT NOT NULL,
        title        TEXT NOT NULL,
        body         TEXT NOT NULL,
        status       TEXT NOT NULL,
        attempts     INTEGER NOT NULL DEFAULT 0,
        next_at      TEXT NOT NULL,
        error        TEXT,
        created_at   TEXT NOT NULL,
        sent_at      TEXT
    );
    CREATE UNIQUE INDEX notifications_source ON notifications(installation, channel, source_key);
    CREATE INDEX notifications_due ON notifications(installation, status, next_at);
    CREATE TABLE cursors (
        installation TEXT NOT NULL,
        name         TEXT NOT NULL,
        position     INTEGER NOT NULL,
        PRIMARY KEY (installation, name)
    );
    """,
    # 15: the optional semantic side of memory (``store/vectors.py``): a remembered turn's embedding, by
    # the model that made it (float16; only while an embedding model is installed).
    {
        "both": "",
        "sqlite": """
        CREATE TABLE memory_vectors (
            memory_id    INTEGER PRIMARY KEY,
            installation TEXT NOT NULL,
            agent        TEXT NOT NULL,
            model        TEXT NOT NULL,
            vector       BLOB NOT NULL
        );
        CREATE INDEX memory_vectors_owner ON memory_vectors(installation, agent, model, memory_id);
        """,
        "postgresql": """
        CREATE TABLE memory_vectors (
            memory_id    BIGINT PRIMARY KEY,
            installation TEXT NOT NULL,
            agent        TEXT NOT NULL,
            model        TEXT NOT NULL,
            vector       BYTEA NOT NULL
        );
        CREATE INDEX memory_vectors_owner ON memory_vectors(installation, agent, model, memory_id);
        """,
    },
    # 16: what planning a goal cost: the planner's model calls (``agent/usage.py`` records), JSON.
    "ALTER TABLE runs ADD COLUMN planning TEXT NOT NULL DEFAULT '[]';",
    # 17: several hosts (``store/workers.py``): the executors of an installation with their heartbeats
    # (the database's clock, epoch seconds), who holds each owned resource and until when, and what
    # another node asks of a job (a stop) or publishes about it (its log's tail).
    """
    CREATE TABLE workers (
        executor_id  TEXT NOT NULL,
        installation TEXT NOT NULL,
        node         TEXT NOT NULL,
        machine      TEXT NOT NULL,
        home         TEXT NOT NULL,
        pid          INTEGER NOT NULL,
        resources    TEXT NOT NULL DEFAULT '[]',
        version      TEXT NOT NULL,
        status       TEXT NOT NULL,
        started_at   REAL NOT NULL,
        beat_at      REAL NOT NULL,
        ended_at     REAL,
        taken_by     TEXT,
        recovered_at REAL,
        PRIMARY KEY (executor_id, version)
    );
    CREATE INDEX workers_installation ON workers(installation, status);
    CREATE TABLE resource_leases (
        installation TEXT NOT NULL,
        resource     TEXT NOT NULL,
        holder       TEXT NOT NULL,
        expires_at   REAL NOT NULL,
        PRIMARY KEY (installation, resource)
    );
    CREATE TABLE job_requests (
        execution_id TEXT PRIMARY KEY,
        stop_reason  TEXT,
        requested_by TEXT,
        requested_at REAL,
        log_tail     TEXT,
        tail_at      REAL
    );
    """,
    # 18: when the caller of a forwarded call that waits for it last said it still does (the database's
    # clock): its holder stops the job once that is a lease old, as a worker stops when its starter dies.
    "ALTER TABLE job_requests ADD COLUMN followed_at REAL;",
)

SCHEMA_TABLE = "tether_schema"


def _adapt(sql: str, dialect: str) -> str:
    if dialect != "postgresql":
        return sql
    return sql.replace(" REAL", " DOUBLE PRECISION").replace(
        "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY"
    )


def version(conn: Any, dialect: str) -> int:
    if dialect == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(7411)"))  # one migrator at a time
        found = conn.execute(text("SELECT to_regclass(:name)"), {"name": SCHEMA_TABLE}).scalar()
        if found is None:
            return 0
    else:
        found = conn.execute(
            text("SELECT name FROM sqlite_master WHERE type = 'table' AND name = :name"),
            {"name": SCHEMA_TABLE},
        ).scalar()
        if found is None:
            # A store from before tether_schema kept its version here.
            return int(conn.exec_driver_sql("PRAGMA user_version").scalar() or 0)
    return int(conn.execute(text(f"SELECT version FROM {SCHEMA_TABLE}")).scalar() or 0)


def migrate(conn: Any, dialect: str, owner: dict[str, str]) -> int:
    """Apply the migrations this database has not seen (inside the caller's write transaction).
    ``owner`` (``installation``, ``host``) is the home that migrates: rows already there become its."""
    current = version(conn, dialect)
    if current > len(MIGRATIONS):
        raise StoreError(
            f"the store is at schema {current}, newer than this tether ({len(MIGRATIONS)}): upgrade tether"
        )
    if current == len(MIGRATIONS):
        return current
    for number in range(current, len(MIGRATIONS)):
        entry = MIGRATIONS[number]
        sql = entry if isinstance(entry, str) else entry["both"] + entry[dialect]
        for statement in _adapt(sql, dialect).split(";"):
            if not statement.strip():
                continue
            if ":installation" in statement:
                conn.execute(text(statement), owner)  # a value, bound: never spliced into the SQL
            else:
                conn.exec_driver_sql(statement)
    conn.exec_driver_sql(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (version INTEGER NOT NULL)")
    conn.exec_driver_sql(f"DELETE FROM {SCHEMA_TABLE}")
    conn.execute(text(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (:v)"), {"v": len(MIGRATIONS)})
    if dialect == "sqlite":
        conn.exec_driver_sql(f"PRAGMA user_version = {len(MIGRATIONS)}")
    return len(MIGRATIONS)
