"""Storage: the readable record of what tether did — jobs, threads, turns, steps and the event log.

One database behind interfaces (SQLAlchemy Core): SQLite in the tether home by default (WAL,
busy_timeout, foreign keys, BEGIN IMMEDIATE writers), PostgreSQL when ``[store].database_url`` says so;
numbered migrations shared by both (schema.py, database.py). Imports only ``tether.tasks``,
``tether.events`` and ``tether.errors``.
"""
