"""What a handler receives: the protocol a task handler may rely on, implemented by the worker."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel


class TaskContext(Protocol):
    """Handed to ``handler(ctx)``.

    A handler returns None, a message (str), data (a mapping), or ``(message, data)``; raises
    ``TaskFailed`` to fail with a message, and calls ``check_stop()`` (or polls ``should_stop()``)
    at safe points so that a stop request ends it cleanly.
    """

    execution_id: str
    task_id: str
    home: Path
    log: logging.Logger

    @property
    def params(self) -> BaseModel | None: ...

    def should_stop(self) -> bool:
        """True once a stop was requested (by a person, a timeout, or the starter's exit)."""
        ...

    def check_stop(self) -> None:
        """Raise ``StopRequested`` if a stop was requested."""
        ...

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early on a stop; False when it woke because of a stop."""
        ...

    def progress(self, fraction: float | None, message: str = "", **data: Any) -> None:
        """Report progress (0.0–1.0, or None when unknown); appended to events.jsonl."""
        ...
