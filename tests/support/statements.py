"""The statements a store runs, as a test sees them: ``statements(engine, keep)`` collects, while
inside, every statement ``engine`` runs that ``keep`` takes, its whitespace collapsed (SQLAlchemy breaks
its lines: ``"FROM events WHERE"`` is then a phrase a test can look for)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import event


@contextlib.contextmanager
def statements(engine: Any, keep: Callable[[str], bool] = lambda s: True) -> Iterator[list[str]]:
    seen: list[str] = []

    def collect(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        flat = " ".join(statement.split())
        if keep(flat):
            seen.append(flat)

    event.listen(engine, "before_cursor_execute", collect)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", collect)


def selects(statement: str) -> bool:
    return statement.upper().startswith("SELECT")
