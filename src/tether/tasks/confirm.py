"""A person's consent to exactly one call: a task id and a digest of its canonical arguments.

Only an interface acting on the person's own act mints one (a "yes" to the question the agent asked, a
``--confirm`` on the thread that waits, a typed ``tether task run … --confirm``, later a button or an
MCP elicitation). A model never can: nothing it returns becomes a ``Confirmation``. The executor runs a
``caution``/``destructive`` call only with a confirmation whose task and digest match that very call,
uses each confirmation once, and the worker checks the digest again against the arguments it runs.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def call_digest(task_id: str, params: Mapping[str, Any]) -> str:
    """A stable digest of one call: the task id and its canonical (validated, JSON) arguments."""
    canonical = json.dumps(
        {"task_id": task_id, "params": dict(params)},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Confirmation:
    """Consent to the call ``task_id`` with the arguments whose ``call_digest`` is ``digest``.

    ``source`` says whose act it was (``person:chat``, ``person:cli``, ``direct:cli`` …) and goes on
    record with the execution; ``nonce`` makes each confirmation usable once.
    """

    task_id: str
    digest: str
    source: str
    nonce: str = field(default_factory=lambda: secrets.token_hex(12))

    def matches(self, task_id: str, digest: str) -> bool:
        return self.task_id == task_id and secrets.compare_digest(self.digest, digest)
