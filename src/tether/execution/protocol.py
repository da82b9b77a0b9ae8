"""The file protocol between the parent and a worker (contract 5).

One folder per execution, under ``<home>/executions/<execution_id>/``, private to the home's owner::

    request.json     written once by the executor before the worker starts, signed with the home's key
    result.json      created exactly once, by the claim: the worker's (its pid and start time) or an
                     observer's that gave the execution up before any worker claimed it ("abandoned");
                     then the published state, replaced atomically (durably, fsync, once completed)
                     and compare-and-set; and the worker's exit code, added by whoever reaped it
    stop.requested   exists once a stop was asked for; holds the reason
    events.jsonl     progress events, one JSON object per line, appended
    worker.log       the worker's stdout, stderr and log records; removed when its worker is reaped
                     and nothing was written to it (and nothing else of its process group lives)
    exit.json        the exit code of a worker reaped before anything claimed the execution (rare)
    .doorbell        a FIFO that wakes whoever waits for the worker (no content); removed when its
                     worker is reaped

Every JSON file carries ``protocol``; a reader refuses a version it does not know. A finished task
leaves two files: its request and its result.

The claim closes the crash windows around a spawn: whoever wants to declare an execution dead before
its worker was seen must first win the claim, so a worker can never run after an observer recorded it
as never started, and a worker that did start is always found through its own record, whatever the
store says. ``result.json`` changes only under an exclusive lock on the execution's folder and only
along the state machine, keeping the claim and the exit code it holds, so two processes finishing the
same job agree on one terminal state.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from tether.execution import doorbell, faults
from tether.tasks.result import TaskResult, TaskStatus

PROTOCOL = 3
READABLE_PROTOCOLS = frozenset({2, PROTOCOL})  # 3 moved the claim and exit code into result.json
EXECUTIONS_DIR = "executions"
KEYS_DIR = "keys"
REQUEST_KEY = "request.key"
EVENT_TAIL_BYTES = 8192
# A result's message and data as published, stored and shown to a model (larger data goes to data.json).
MAX_MESSAGE_CHARS = 4_000
MAX_DATA_BYTES = 256 * 1024
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


M = TypeVar("M", bound=BaseModel)


class ProtocolError(Exception):
    """A protocol file exists but cannot be understood (wrong version, wrong shape, torn, unsigned)."""


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
    def legacy_claim(self) -> Path:
        """Where tether before protocol 3 kept the claim: still read, never written."""
        return self.dir / "worker.json"

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

    @property
    def doorbell(self) -> Path:
        return self.dir / ".doorbell"


class Confirmation(BaseModel):
    """The person's consent to exactly one call, as it travels in the request file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    digest: str
    source: str
    nonce: str


class Request(BaseModel):
    """Everything a worker needs, and nothing it could not re-derive and re-check itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    protocol: int = PROTOCOL
    execution_id: str
    task_id: str
    registry_ref: str
    caller: str
    # The agent's grants the call was admitted under (``tasks/grants.py``, as JSON): the worker checks
    # the task against them again. None: no narrowing beyond the caller's exposure.
    grants: list[list[str]] | None = None
    origin: str | None = None
    params: dict[str, Any]
    confirmation: Confirmation | None = None
    env: dict[str, str] = {}  # the worker's whole environment (allowlisted by the executor)
    # Where the caller imported the registry from (e.g. the folder holding ``myapp/``): the worker can
    # import it too, whoever forked it (appended to sys.path, so it never shadows an installed module).
    import_path: str | None = None
    home: str
    background: bool
    detach: bool
    # A detached job on a resource its executor holds for the installation: it stops when that executor
    # dies all the same, since the hold dies with it and another host's worker may take the resource.
    tied: bool = False
    parent_pid: int
    parent_create_time: float
    parent_poll_s: float
    stop_grace_s: float
    created_at: float
    # The W3C traceparent of the call that started it (``tether/telemetry.py``): its worker's span hangs
    # under it. None when nothing is traced (the worker then imports nothing of OpenTelemetry).
    trace: str | None = None
    signature: str = ""


class Claim(BaseModel):
    """Who owns this execution: its worker, or the observer that gave it up before any worker came."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    protocol: int = PROTOCOL
    pid: int
    create_time: float = 0.0
    abandoned: str | None = None  # the reason an observer gave the execution up
    at: float

    @property
    def worker(self) -> bool:
        return self.abandoned is None


class ResultFile(BaseModel):
    """``result.json``: the claim, then the published state, then the worker's exit code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    protocol: int = PROTOCOL
    pid: int  # who wrote this version
    updated_at: float
    result: TaskResult | None = None  # nothing published yet (only claimed)
    claim: Claim | None = None
    exit_code: int | None = None


# -- writing ------------------------------------------------------------------------------------


def private_mkdir(path: Path) -> None:
    """Create ``path`` and any missing parents owner-only (``parents=True`` alone would not)."""
    if path.is_dir():
        return
    private_mkdir(path.parent)
    path.mkdir(mode=PRIVATE_DIR, exist_ok=True)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_private(path: Path, data: bytes, *, durable: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, payload: dict[str, Any], *, durable: bool = True) -> None:
    """Write ``payload`` so a reader sees the old file or the new one, never a torn one, even after a
    power loss when ``durable`` (file and folder are fsynced)."""
    tmp = _tmp_name(path)
    try:
        _write_private(tmp, json.dumps(payload, ensure_ascii=False).encode(), durable=durable)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        _fsync_dir(path.parent)


def _create_exclusive(path: Path, payload: dict[str, Any], *, durable: bool = True) -> bool:
    """Create ``path`` with ``payload`` only if it does not exist; readers never see it half-written."""
    tmp = _tmp_name(path)
    _write_private(tmp, json.dumps(payload).encode(), durable=durable)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    if durable:
        _fsync_dir(path.parent)
    return True


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ProtocolError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"{path.name} is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(payload, dict) or payload.get("protocol") not in READABLE_PROTOCOLS:
        found = payload.get("protocol") if isinstance(payload, dict) else None
        raise ProtocolError(f"{path.name}: protocol {found!r} is not the supported version {PROTOCOL}")
    return payload


def _model(kind: type[M], path: Path, payload: dict[str, Any]) -> M:
    try:
        return kind.model_validate(payload)
    except ValueError as exc:
        raise ProtocolError(f"{path.name} has the wrong shape: {str(exc).splitlines()[0]}") from exc


# -- the home's request key ------------------------------------------------------------------------


def request_key(home: Path, *, create: bool = True) -> bytes | None:
    """The home's secret for signing requests, created owner-only on first use (None if it does not
    exist and ``create`` is False: a worker never makes one up)."""
    path = home / KEYS_DIR / REQUEST_KEY
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = b""
    except OSError:
        return None
    if len(key) >= 32 or not create:
        return key if len(key) >= 32 else None
    private_mkdir(path.parent)
    from tether.execution.lock import exclusive

    # One creator at a time: a process that found no key (or a damaged one) must not replace the key
    # another has just created and already signed with.
    with exclusive(path.parent / f"{REQUEST_KEY}.lock"):
        with contextlib.suppress(FileNotFoundError):
            key = path.read_bytes()
            if len(key) >= 32:
                return key
        tmp = _tmp_name(path)
        _write_private(tmp, secrets.token_bytes(32), durable=True)
        try:
            os.replace(tmp, path)  # a damaged key (cut short) would make every worker refuse
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return path.read_bytes()


def _signed_bytes(request: Request) -> bytes:
    body = request.model_dump(mode="json", exclude={"signature"})
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def sign(request: Request, key: bytes) -> Request:
    digest = hmac.new(key, _signed_bytes(request), hashlib.sha256).hexdigest()
    return request.model_copy(update={"signature": digest})


def signed_by(request: Request, key: bytes) -> bool:
    expected = hmac.new(key, _signed_bytes(request), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request.signature)


# -- request, claim, result -----------------------------------------------------------------------


def write_request(paths: ExecutionPaths, request: Request) -> None:
    # Not fsynced: after a power loss no starter lives to wait for it, and an execution whose request
    # is gone is given up like any other that no worker claimed.
    private_mkdir(paths.dir)
    write_json_atomic(paths.request, request.model_dump(mode="json"), durable=False)
    doorbell.create(paths.doorbell)


def read_request(paths: ExecutionPaths) -> Request:
    payload = _read_json(paths.request)
    if payload is None:
        raise ProtocolError(f"{paths.request} does not exist")
    return _model(Request, paths.request, payload)


def claim_for_worker(paths: ExecutionPaths, pid: int, create_time: float) -> bool:
    """The worker's claim on its execution (``result.json`` created, nothing published yet); False
    when it was abandoned or claimed before.

    Not fsynced: it only matters while processes live (a power loss ends them all), and the durable
    ``running`` state that follows it is what says a handler may have begun."""
    claim = Claim(pid=pid, create_time=create_time, at=time.time())
    if paths.legacy_claim.exists():  # claimed by a worker of an older tether
        return False
    return _create_exclusive(paths.result, _record(None, claim).model_dump(mode="json"), durable=False)


def abandon(paths: ExecutionPaths, reason: str) -> Claim:
    """Give an unclaimed execution up so that no worker will ever run it; returns the claim that won
    (ours, or the worker's when it claimed first)."""
    mine = Claim(pid=os.getpid(), abandoned=reason, at=time.time())
    private_mkdir(paths.dir)  # a starter that stalled before writing its request finds the claim taken
    if _create_exclusive(paths.result, _record(None, mine).model_dump(mode="json")):
        return mine
    found = read_claim(paths)
    return found if found is not None else mine


def _record(result: TaskResult | None, claim: Claim | None, exit_code: int | None = None) -> ResultFile:
    return ResultFile(
        pid=os.getpid(), updated_at=time.time(), result=result, claim=claim, exit_code=exit_code
    )


def read_record(paths: ExecutionPaths) -> ResultFile | None:
    """``result.json`` whole: the claim, the published state and the exit code (None: not claimed)."""
    payload = _read_json(paths.result)
    return None if payload is None else _model(ResultFile, paths.result, payload)


def read_claim(paths: ExecutionPaths) -> Claim | None:
    record = read_record(paths)
    if record is not None and record.claim is not None:
        return record.claim
    payload = _read_json(paths.legacy_claim)
    return None if payload is None else _model(Claim, paths.legacy_claim, payload)


def read_result(paths: ExecutionPaths) -> TaskResult | None:
    record = read_record(paths)
    return None if record is None else record.result


def _write_record(paths: ExecutionPaths, record: ResultFile, *, durable: bool) -> None:
    write_json_atomic(paths.result, record.model_dump(mode="json"), durable=durable)
    doorbell.ring(paths.doorbell)


@contextlib.contextmanager
def _result_lock(paths: ExecutionPaths) -> Iterator[None]:
    from tether.execution.lock import exclusive_dir

    with exclusive_dir(paths.dir):
        yield


def current_record(paths: ExecutionPaths) -> ResultFile | None:
    """What ``result.json`` holds now; a torn or unreadable file counts as empty (its writers say so
    under the lock, its followers read it again on its next change)."""
    try:
        return read_record(paths)
    except ProtocolError:
        return None


def publish(paths: ExecutionPaths, result: TaskResult, *, durable: bool | None = None) -> TaskResult:
    """Compare-and-set: write ``result`` unless the file holds a state that may not become it.

    Returns what the file holds afterwards (``result``, or the terminal state that won). A torn or
    unreadable file counts as empty: the worker is its only writer while it lives, and the finishers
    that write after it died all go through this lock. The claim and the exit code are kept.
    ``durable``: ``completed`` is durable by default (file and folder fsynced): a task whose effects
    happened must not look unfinished, and be run again, because a power loss took its result away.
    Every other state says the task did not complete, which recovery concludes from a dead worker
    anyway (an fsync costs milliseconds, on the path of every stop).
    """
    faults.point("publish.before_lock")
    with _result_lock(paths):
        found = current_record(paths)
        current = None if found is None else found.result
        faults.point("publish.after_read")
        if current is not None and not current.status.can_become(result.status):
            return current
        claim, code = (None, None) if found is None else (found.claim, found.exit_code)
        durable = result.status is TaskStatus.COMPLETED if durable is None else durable
        _write_record(paths, _record(result, claim, code), durable=durable)
        return result


def request_stop(paths: ExecutionPaths, reason: str) -> None:
    private_mkdir(paths.dir)  # a worker that has yet to start must find it, however late it comes
    if not paths.stop.exists():
        write_json_atomic(
            paths.stop, {"protocol": PROTOCOL, "reason": reason, "requested_at": time.time()}, durable=False
        )


def stop_reason(paths: ExecutionPaths) -> str | None:
    try:
        payload = _read_json(paths.stop)
    except ProtocolError:
        return "stop"
    return None if payload is None else str(payload.get("reason", "stop"))


def append_event(paths: ExecutionPaths, kind: str, **fields: Any) -> None:
    line = json.dumps({"ts": time.time(), "kind": kind, **fields}, ensure_ascii=False, default=str) + "\n"
    # O_APPEND writes of one short line land whole, even with several writers.
    fd = os.open(paths.events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
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
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue  # the first line of the tail may be cut
        if isinstance(event, dict) and event.get("kind") == "progress":
            return event
    return None


def write_exit(paths: ExecutionPaths, returncode: int, pid: int | None = None) -> None:
    """Record the exit code of the worker ``pid`` that was just reaped, in ``result.json`` beside its
    claim (in ``exit.json`` when nothing claimed the execution yet); a process that is not the
    claimant (a second fork of a retried spawn that found the claim taken) records nothing.

    The claimant's end is the execution's last event from its own side: its doorbell is removed (whoever
    listens keeps its descriptor and is rung one last time; a later follower reads the file), and so is
    an empty log once nothing of the worker's process group is left to write to it. Both are gone by the
    time the exit code can be read."""
    if not paths.dir.exists():
        return
    bell = doorbell.open_bell(paths.doorbell)
    try:
        with _result_lock(paths):
            found = current_record(paths)
            if found is None:
                write_json_atomic(paths.exit, {"protocol": PROTOCOL, "returncode": returncode}, durable=False)
                return
            claim = found.claim
            if pid is not None and claim is not None and claim.worker:
                if claim.pid != pid:
                    return
                with contextlib.suppress(OSError):
                    paths.doorbell.unlink()
                _drop_empty_log(paths, pid)
            record = found.model_copy(update={"exit_code": returncode, "updated_at": time.time()})
            write_json_atomic(paths.result, record.model_dump(mode="json"), durable=False)
    finally:
        if bell is not None:
            doorbell.ring_on(bell)  # whoever settles the execution is waiting for this


def _drop_empty_log(paths: ExecutionPaths, pid: int) -> None:
    if os.name != "posix":
        return
    try:
        if paths.log.stat().st_size:
            return
        os.killpg(pid, 0)  # something the worker started still runs in its group and may yet write
    except ProcessLookupError:
        with contextlib.suppress(OSError):
            paths.log.unlink()
    except OSError:
        return


def read_exit(paths: ExecutionPaths) -> int | None:
    try:
        record = read_record(paths)
    except ProtocolError:
        record = None
    if record is not None and record.exit_code is not None:
        return record.exit_code
    try:
        payload = _read_json(paths.exit)
        return None if payload is None else int(payload["returncode"])
    except (ProtocolError, KeyError, TypeError, ValueError):
        return None


def log_tail(paths: ExecutionPaths, lines: int) -> str:
    try:
        with open(paths.log, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:]) if lines else ""


def bounded(result: TaskResult, spill_dir: Path | None = None) -> TaskResult:
    """``result`` within the size limits, and JSON-safe. A long message is cut (and says so); data
    larger than ``MAX_DATA_BYTES`` is written whole to ``data.json`` in ``spill_dir`` and replaced by a
    note saying where, so nothing is lost and no record, prompt or event carries megabytes."""
    message = clip(result.message, MAX_MESSAGE_CHARS)
    data = result.data
    try:
        encoded = json.dumps(data, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        # Not plain JSON (a set, a datetime, NaN …): keep what can be kept, as text where it must.
        try:
            encoded = json.dumps(data, ensure_ascii=False, default=str)
            data = json.loads(encoded)
        except (TypeError, ValueError, RecursionError) as exc:
            data = {"unserializable": f"the handler's data could not be stored ({type(exc).__name__})"}
            encoded = json.dumps(data)
    size = len(encoded.encode())
    if size > MAX_DATA_BYTES:
        note: dict[str, Any] = {"truncated": True, "data_bytes": size}
        if spill_dir is not None and spill_dir.is_dir():
            spill = spill_dir / "data.json"
            _write_private(spill, encoded.encode(), durable=True)
            note["data_file"] = str(spill)
        data = note
    if data is result.data and message == result.message:
        return result
    return result.model_copy(update={"message": message, "data": data})


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}… [{len(text) - limit + 40} more characters]"


TIMEOUT = "timeout"


def stopped_status(reason: str) -> TaskStatus:
    """The terminal state of a task ended by a stop: a timeout is a failure, anything else a stop."""
    return TaskStatus.FAILED if reason == TIMEOUT else TaskStatus.STOPPED
