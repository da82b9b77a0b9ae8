"""The readable record of supervisor runs: a run, its tasks and every attempt of each task.

DBOS keeps the recovery log (which step of which workflow segment finished); this is what people and
the engine read: a run's plan and status, each task's state, attempts (one execution each), outputs,
diagnostics and the review a person is asked for. Every change is appended to the event log (topic
``run:<id>``) in the transaction that made it.

Writes that the engine may repeat after a crash are idempotent (an attempt is keyed by run, task and
number; its execution id is unique), and the answers of people are compare-and-set: a review is
answered once, so the continuation it enqueues is enqueued once.

A run and each attempt record the installation (tether home) and host that run them. Several homes may
share the database: each lists every run, but only its own executors drive, continue and prune its runs
(``active`` and ``delete_ended`` are this installation's).

This module owns the records and the ``RunStore`` interface; ``store/runs_sql.py`` is its SQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

RUN_STATUSES = ("running", "waiting_for_human", "completed", "failed", "cancelled")
RUN_TERMINAL = frozenset({"completed", "failed", "cancelled"})
# A task: pending → running → completed | failed | skipped | rejected | waiting_for_human (→ running …)
TASK_DONE = frozenset({"completed", "skipped"})
TASK_ENDED = frozenset({"completed", "skipped", "failed", "rejected", "cancelled"})


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRecord:
    task_id: str
    attempt: int
    execution_id: str
    status: str
    message: str
    how: dict[str, Any]
    started_at: str
    ended_at: str | None
    duration_seconds: float
    installation: str | None = None  # the home whose executor ran it
    host: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> AttemptRecord:
        m = row._mapping
        return cls(
            task_id=m["task_id"],
            attempt=int(m["attempt"]),
            execution_id=m["execution_id"],
            status=m["status"],
            message=m["message"],
            how=json.loads(m["how"]),
            started_at=m["started_at"],
            ended_at=m["ended_at"],
            duration_seconds=float(m["duration_seconds"]),
            installation=m["installation"],
            host=m["host"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskState:
    task_id: str
    position: int
    status: str
    attempts: int
    iterations: int
    message: str
    diagnostics: dict[str, Any]
    outputs: dict[str, Any]
    review: dict[str, Any] | None
    overrides: dict[str, Any]
    started_at: str | None
    ended_at: str | None
    updated_at: str

    @classmethod
    def from_row(cls, row: Any) -> TaskState:
        m = row._mapping
        return cls(
            task_id=m["task_id"],
            position=int(m["position"]),
            status=m["status"],
            attempts=int(m["attempts"]),
            iterations=int(m["iterations"]),
            message=m["message"],
            diagnostics=json.loads(m["diagnostics"]),
            outputs=json.loads(m["outputs"]),
            review=None if m["review"] is None else json.loads(m["review"]),
            overrides=json.loads(m["overrides"]),
            started_at=m["started_at"],
            ended_at=m["ended_at"],
            updated_at=m["updated_at"],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.task_id,
            "status": self.status,
            "attempts": self.attempts,
            "iterations": self.iterations,
            "message": self.message,
            "diagnostics": self.diagnostics,
            "outputs": self.outputs,
            "review": self.review,
            "overrides": self.overrides,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    run_id: str
    goal: str
    status: str
    plan: dict[str, Any]
    caller: str
    segment: int
    message: str
    created_at: str
    updated_at: str
    ended_at: str | None
    tasks: tuple[TaskState, ...] = ()
    attempts: tuple[AttemptRecord, ...] = field(default=())
    plan_version: int = 0  # grows when tasks join the plan (follow-ups): a cached plan is still good
    rev: int = 0  # grows with every write that changes a task (see ``SqlRunStore.changes``)
    installation: str | None = None  # the home whose executors run it
    host: str | None = None
    # A goal's planner's model calls (``agent/usage.py`` records): what planning it cost.
    planning: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_row(
        cls, row: Any, tasks: tuple[TaskState, ...] = (), attempts: tuple[AttemptRecord, ...] = ()
    ) -> RunRecord:
        m = row._mapping
        return cls(
            run_id=m["run_id"],
            goal=m["goal"],
            status=m["status"],
            plan=json.loads(m["plan"]) if "plan" in m else {},
            caller=m["caller"],
            segment=int(m["segment"]),
            message=m["message"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            ended_at=m["ended_at"],
            tasks=tasks,
            attempts=attempts,
            plan_version=int(m["plan_version"]),
            rev=int(m["rev"]),
            installation=m["installation"],
            host=m["host"],
            planning=tuple(json.loads(m["planning"] or "[]")) if "planning" in m else (),
        )

    @property
    def terminal(self) -> bool:
        return self.status in RUN_TERMINAL

    def task(self, task_id: str) -> TaskState | None:
        return next((t for t in self.tasks if t.task_id == task_id), None)

    def attempts_of(self, task_id: str) -> list[AttemptRecord]:
        return [a for a in self.attempts if a.task_id == task_id]


@dataclass(frozen=True, slots=True)
class Written:
    """What a write of a run's tasks left on record: the run's revision after it, the tasks it wrote as
    they now are, and the run's head (no plan, no tasks) when the write read it back."""

    rev: int
    tasks: tuple[TaskState, ...]
    head: RunRecord | None = None


class RunStore(Protocol):
    def create(self, run_id: str, *, goal: str, plan: dict[str, Any], caller: str) -> RunRecord: ...
    def get(self, run_id: str) -> RunRecord | None: ...
    def view(
        self,
        run_id: str,
        *,
        task_ids: list[str] | None = None,
        attempts_of: str | None = None,
        failed_attempts: bool = False,
    ) -> RunRecord | None: ...
    def heads(self, run_ids: Sequence[str]) -> dict[str, RunRecord]: ...
    def changes(
        self, run_id: str, since: int, *, plan: bool = False
    ) -> tuple[RunRecord, list[TaskState]] | None: ...
    def plan(self, run_id: str) -> tuple[dict[str, Any], int]: ...
    def list(self, *, limit: int = 50, status: str | None = None, mine: bool = False) -> list[RunRecord]: ...
    def task_counts(self, run_ids: list[str]) -> dict[str, tuple[int, int]]: ...
    def wait_for(self, resources: Sequence[str], run_id: str, task_id: str, since: float) -> None: ...
    def first_waiters(self, resources: Sequence[str]) -> dict[str, tuple[str, str]]: ...
    def ids_with_prefix(self, prefix: str, limit: int = 5) -> list[str]: ...
