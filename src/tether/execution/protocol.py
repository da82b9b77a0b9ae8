"""The file protocol between the parent and a worker (contract 5).

One folder per execution, under ``<home>/executions/<execution_id>/``::

    request.json     written once by the parent before the worker starts
    result.json      the worker's published state; always a temp file + os.replace, never half-written
    stop.requested   exists once a stop was asked for; holds the reason
    events.jsonl     progress events, one JSON object per line, appended
    worker.log       the worker's stdout, stderr and log records
    exit.json        the worker's exit code, written by whoever reaped it (if anyone could)

Every JSON file carries ``protocol``; a reader refuses a version it does not know.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from tether.tasks.result import TaskResult, TaskStatus

PROTOCOL = 1
EXECUTIONS_DIR = "executions"
EVENT_TAIL_BYTES = 8192


class ProtocolError(Exception):
    """A protocol file exists but cannot be understood (wrong version, wrong shape)."""


@dataclass(frozen=True, slots=True)
class ExecutionPaths:
    dir: Path

    @classmethod
    def of(cls, home: Path, execution_id: str) -> ExecutionPaths:
        return cls(home / EXECUTIONS_DIR / execution_id)

    @property
    def request(self) -> Path:
        return self.dir / "request.json"

    @property
    def result(self) -> Path:
        return self.dir / "result.json"

    @property
    def stop(self) -> Path:
        return self.dir / "stop.requested"

    @property
    def events(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def log(self) -> Path:
        return self.dir / "worker.log"

    @property
    def exit(self) -> Path:
        return self.dir / "exit.json"


class Request(BaseModel):
    """Everything a worker needs, and nothing it could not re-derive and re-check itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    protocol: int = PROTOCOL
    execution_id: str
    task_id: str
    registry_ref: str
    caller: str
    params: dict[str, Any]
    home: str
    background: bool
    detach: bool
    parent_pid: int
    parent_create_time: float
    parent_poll_s: float
    stop_grace_s: float
    created_at: float


class ResultFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    protocol: int = PROTOCOL
    pid: int
    updated_at: float
    result: TaskResult


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` so a reader sees the old file or the new one, never a torn one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, ensure_ascii=False)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        payload = json.loads(raw)
    except ValueError as exc:
        raise ProtocolError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("protocol") != PROTOCOL:
        found = payload.get("protocol") if isinstance(payload, dict) else None
        raise ProtocolError(f"{path}: protocol {found!r} is not the supported version {PROTOCOL}")
    return payload


def write_request(paths: ExecutionPaths, request: Request) -> None:
    paths.dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(paths.request, request.model_dump(mode="json"))


def read_request(paths: ExecutionPaths) -> Request:
    payload = _read_json(paths.request)
    if payload is None:
        raise ProtocolError(f"{paths.request} does not exist")
    return Request.model_validate(payload)


def write_result(paths: ExecutionPaths, result: TaskResult, *, pid: int | None = None) -> None:
    record = ResultFile(pid=os.getpid() if pid is None else pid, updated_at=time.time(), result=result)
    write_json_atomic(paths.result, record.model_dump(mode="json"))


def read_result(paths: ExecutionPaths) -> TaskResult | None:
    payload = _read_json(paths.result)
    return None if payload is None else ResultFile.model_validate(payload).result


def publish(paths: ExecutionPaths, result: TaskResult) -> bool:
    """Write ``result`` unless the file already holds a state that may not become it. True if written.

    Only one process writes at a time: the worker while it lives, a job manager after it died.
    """
    current = read_result(paths)
    if current is not None and not current.status.can_become(result.status):
        return False
    write_result(paths, result)
    return True


def request_stop(paths: ExecutionPaths, reason: str) -> None:
    if not paths.stop.exists():
        write_json_atomic(paths.stop, {"protocol": PROTOCOL, "reason": reason, "requested_at": time.time()})


def stop_reason(paths: ExecutionPaths) -> str | None:
    try:
        payload = _read_json(paths.stop)
    except ProtocolError:
        return "stop"
    return None if payload is None else str(payload.get("reason", "stop"))


def append_event(paths: ExecutionPaths, kind: str, **fields: Any) -> None:
    line = json.dumps({"ts": time.time(), "kind": kind, **fields}, ensure_ascii=False) + "\n"
    # O_APPEND writes of one short line land whole, even with several writers.
    fd = os.open(paths.events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def last_progress(paths: ExecutionPaths) -> dict[str, Any] | None:
    """The newest progress event, reading only the file's tail."""
    try:
        with open(paths.events, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - EVENT_TAIL_BYTES))
            tail = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    for line in reversed(tail.splitlines()):
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the first line of the tail may be cut
        if event.get("kind") == "progress":
            return event
    return None


def write_exit(paths: ExecutionPaths, returncode: int) -> None:
    if paths.dir.exists():
        write_json_atomic(paths.exit, {"protocol": PROTOCOL, "returncode": returncode})


def read_exit(paths: ExecutionPaths) -> int | None:
    try:
        payload = _read_json(paths.exit)
    except ProtocolError:
        return None
    return None if payload is None else int(payload["returncode"])


def log_tail(paths: ExecutionPaths, lines: int) -> str:
    try:
        with open(paths.log, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


TIMEOUT = "timeout"


def stopped_status(reason: str) -> TaskStatus:
    """The terminal state of a task ended by a stop: a timeout is a failure, anything else a stop."""
    return TaskStatus.FAILED if reason == TIMEOUT else TaskStatus.STOPPED
