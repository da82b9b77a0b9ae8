"""Storage: the readable record of what tether did — jobs, threads, turns, steps, runs and the event log.

One database behind interfaces (SQLAlchemy Core): SQLite in the tether home by default (WAL,
busy_timeout, foreign keys, BEGIN IMMEDIATE writers), PostgreSQL when ``[store].database_url`` says so;
numbered migrations shared by both (schema.py, migrations.py, database.py). Jobs (jobs.py); threads,
turns, messages and steps (threads.py: the records, the interface and an in-memory store;
threads_sql.py: the SQL store); supervisor runs (runs.py, runs_sql.py, their resource queue in
resource_queue.py); the event log (events.py); generated files' records (artifacts.py) and their files
on disk (artifact_files.py, above both the job and artifact stores); dialogue memory (memories.py,
terms.py); initiative's decisions and thresholds (initiative.py); notification channels, outbox and
event-log cursors (notifications.py).
Imports only ``tether.tasks``, ``tether.events`` and ``tether.errors``.
"""
