"""Storage: the readable record of what tether did (jobs now; threads, steps and runs later).

SQLite in the tether home by default (WAL, busy_timeout, foreign keys, numbered migrations).
Imports only ``tether.tasks`` and ``tether.errors``.
"""
