"""The job table: one durable record per execution, visible to every process of one tether home.

Status changes go through ``transition``, which applies the state machine of ``TaskStatus`` inside one
``BEGIN IMMEDIATE`` transaction: two processes reconciling the same job cannot both win, and a
terminal state is never overwritten.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tether.errors import StoreError
from tether.store.schema import DB_FILE, Database
from tether.tasks.result import TERMINAL, TaskResult, TaskStatus


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    execution_id: str
    task_id: str
    caller: str
    status: TaskStatus
    message: str
    data: dict[str, Any]
    params: dict[str, Any]
    resources: tuple[str, ...]
    background: bool
    detached: bool
    pid: int | None
    create_time: float | None
    exit_code: int | None
    duration_seconds: float
    created_at: str
    updated_at: str
    ended_at: str | None
    origin: str | None = None
    starter_pid: int | None = None
    starter_create_time: float | None = None
    confirmation: str | None = None
    confirmed_by: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def to_result(self) -> TaskResult:
        return TaskResult(
            task_id=self.task_id,
            execution_id=self.execution_id,
            status=self.status,
            message=self.message,
            duration_seconds=self.duration_seconds,
            data=dict(self.data),
        )

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> JobRecord:
        return cls(
            execution_id=row["execution_id"],
            task_id=row["task_id"],
            caller=row["caller"],
            status=TaskStatus(row["status"]),
            message=row["message"],
            data=json.loads(row["data"]),
            params=json.loads(row["params"]),
            resources=tuple(json.loads(row["resources"])),
            background=bool(row["background"]),
            detached=bool(row["detached"]),
            pid=row["pid"],
            create_time=row["create_time"],
            exit_code=row["exit_code"],
            duration_seconds=row["duration_seconds"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            ended_at=row["ended_at"],
            origin=row["origin"],
            starter_pid=row["starter_pid"],
            starter_create_time=row["starter_create_time"],
            confirmation=row["confirmation"],
            confirmed_by=row["confirmed_by"],
        )


class ConfirmationUsed(Exception):
    """The confirmation's nonce is already on record: it authorized another execution."""

    def __init__(self, execution_id: str) -> None:
        super().__init__(execution_id)
        self.execution_id = execution_id


class JobRepo(Database):
    """Thread-safe access to the job table of one database file."""

    @classmethod
    def in_home(cls, home: Path, *, busy_timeout_s: float | None = None) -> JobRepo:
        if busy_timeout_s is None:
            return cls(home / DB_FILE)
        return cls(home / DB_FILE, busy_timeout_s=busy_timeout_s)

    def insert(
        self,
        result: TaskResult,
        *,
        caller: str,
        params: dict[str, Any],
        resources: Sequence[str] = (),
        background: bool = False,
        detached: bool = False,
        origin: str | None = None,
        starter: tuple[int, float] | None = None,
        confirmation: str | None = None,
        confirmed_by: str | None = None,
    ) -> None:
        """Insert the job's first record; ``ConfirmationUsed`` if ``confirmation`` is on record already."""
        now = _now()
        with self._write() as conn:
            if confirmation is not None:
                used = conn.execute(
                    "SELECT execution_id FROM jobs WHERE confirmation = ?", (confirmation,)
                ).fetchone()
                if used is not None:
                    raise ConfirmationUsed(used["execution_id"])
            conn.execute(
                "INSERT INTO jobs (execution_id, task_id, caller, status, message, data, params, resources,"
                " background, detached, duration_seconds, created_at, updated_at, ended_at, origin,"
                " starter_pid, starter_create_time, confirmation, confirmed_by)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    result.execution_id,
                    result.task_id,
                    caller,
                    result.status.value,
                    result.message,
                    json.dumps(result.data, ensure_ascii=False, default=str),
                    json.dumps(params, ensure_ascii=False, default=str),
                    json.dumps(list(resources)),
                    int(background),
                    int(detached),
                    result.duration_seconds,
                    now,
                    now,
                    now if result.status in TERMINAL else None,
                    origin,
                    None if starter is None else starter[0],
                    None if starter is None else starter[1],
                    confirmation,
                    confirmed_by,
                ),
            )

    def set_process(self, execution_id: str, pid: int, create_time: float) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE jobs SET pid = ?, create_time = ?, updated_at = ? WHERE execution_id = ?",
                (pid, create_time, _now(), execution_id),
            )

    def transition(self, result: TaskResult, *, exit_code: int | None = None) -> JobRecord:
        """Move the job to ``result`` if the state machine allows it; returns the record as it now is."""
        with self._write() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE execution_id = ?", (result.execution_id,)).fetchone()
            if row is None:
                raise StoreError(f"no job {result.execution_id!r} in the store")
            current = TaskStatus(row["status"])
            if current in TERMINAL or not current.can_reach(result.status):
                return JobRecord.from_row(row)
            now = _now()
            conn.execute(
                "UPDATE jobs SET status = ?, message = ?, data = ?, duration_seconds = ?, updated_at = ?,"
                " ended_at = ?, exit_code = COALESCE(?, exit_code) WHERE execution_id = ?",
                (
                    result.status.value,
                    result.message,
                    json.dumps(result.data, ensure_ascii=False, default=str),
                    result.duration_seconds,
                    now,
                    now if result.status in TERMINAL else None,
                    exit_code,
                    result.execution_id,
                ),
            )
            row = conn.execute("SELECT * FROM jobs WHERE execution_id = ?", (result.execution_id,)).fetchone()
            return JobRecord.from_row(row)

    def get(self, execution_id: str) -> JobRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE execution_id = ?", (execution_id,)).fetchone()
        return None if row is None else JobRecord.from_row(row)

    def list(
        self,
        *,
        active: bool = False,
        limit: int = 100,
        origin: str | None = None,
        task_ids: Sequence[str] | None = None,
    ) -> list[JobRecord]:
        """Newest first; only pending/running with ``active``, only one origin or some tasks if given."""
        where: list[str] = []
        args: list[Any] = []
        if active:
            where.append("status IN (?, ?)")
            args += [TaskStatus.PENDING.value, TaskStatus.RUNNING.value]
        if origin is not None:
            where.append("origin = ?")
            args.append(origin)
        if task_ids is not None:
            if not task_ids:
                return []
            where.append(f"task_id IN ({', '.join('?' * len(task_ids))})")
            args += list(task_ids)
        sql = "SELECT * FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, execution_id DESC LIMIT ?"
        with self._read() as conn:
            rows = conn.execute(sql, (*args, limit)).fetchall()
        return [JobRecord.from_row(row) for row in rows]
