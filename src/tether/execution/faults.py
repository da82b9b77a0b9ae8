"""Fault points: named places where a test can stop a process at the exact moment that matters.

Crash windows such as "the worker exists but its pid is not on record yet" last microseconds; a
random kill rarely lands in them. A test sets ``TETHER_FAULTS`` to act at named points instead::

    TETHER_FAULTS="executor.after_spawn=kill"
    TETHER_FAULTS="worker.before_handshake=touch:/tmp/x/reached+wait:/tmp/x/go"

Actions, joined with ``+`` and run in order: ``kill`` (SIGKILL this process), ``touch:PATH`` (create a
file: "I am here"), ``wait:PATH`` (block until the file exists, at most a minute). Unset, a point costs
one dictionary lookup. Workers see the variable only when a test passes it in ``[execution].worker_env``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

FAULTS_ENV = "TETHER_FAULTS"
WAIT_LIMIT_S = 60.0


def _parse(text: str) -> dict[str, list[str]]:
    points: dict[str, list[str]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, actions = item.partition("=")
        points[name.strip()] = [a for a in actions.split("+") if a]
    return points


_POINTS = _parse(os.environ.get(FAULTS_ENV, ""))


def reload() -> None:
    """Read ``TETHER_FAULTS`` again (a process forked from a preloaded server has a new environment)."""
    _POINTS.clear()
    _POINTS.update(_parse(os.environ.get(FAULTS_ENV, "")))


def armed(name: str) -> bool:
    """Whether a test attached actions to ``name`` (an async caller then runs ``point`` in a thread)."""
    return name in _POINTS


def point(name: str) -> None:
    """Run the actions a test attached to ``name``, if any."""
    for action in _POINTS.get(name, ()):
        verb, _, argument = action.partition(":")
        if verb == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif verb == "touch":
            Path(argument).touch()
        elif verb == "wait":
            deadline = time.monotonic() + WAIT_LIMIT_S
            while not Path(argument).exists() and time.monotonic() < deadline:
                time.sleep(0.005)
