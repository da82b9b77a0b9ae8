"""Fixtures of the supervisor's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.workers import Worker


@pytest.fixture
def workers(home: Path) -> Iterator[list[Worker]]:
    """The ``tether worker``s a test starts (``Worker(home)``), killed with their groups at its end."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.close()
