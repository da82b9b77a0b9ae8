"""Retry and circuit breaking for services, shared per key (a model's base URL) by everything that
holds one ``ResilienceRegistry`` (the runtime of a tether home owns one).

Retry (tenacity) on 408/429/500/502/503/504 and on connection failures, with exponential backoff and
full jitter, honouring ``Retry-After``; never on a permanent content-policy refusal or another 4xx.
A circuit breaker per base URL: CLOSED → (``failure_threshold`` consecutive failures) → OPEN →
(``recovery_s`` later) → HALF_OPEN, where ``half_open_probes`` trial calls decide CLOSED or OPEN again.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

from tether.errors import CircuitOpen, ModelConnectionError, ModelError, ModelHTTPError

if TYPE_CHECKING:
    from tenacity import RetryCallState

T = TypeVar("T")

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    # A Retry-After longer than this is not waited out: the call fails and says when to come back.
    max_retry_after_s: float = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerPolicy:
    failure_threshold: int = 5
    recovery_s: float = 30.0
    half_open_probes: int = 1


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Thread-safe; ``clock`` is injectable so tests move time instead of waiting for it.

    With a ``path`` the breaker's state lives in that file, shared by every process of the home (a
    command that finds a server dead leaves the breaker open for the next one): each decision reads
    the file under an exclusive lock and writes it back. ``clock`` is then wall-clock time, which all
    processes share. A file that cannot be read is a closed breaker, never an error."""

    def __init__(
        self,
        policy: BreakerPolicy,
        *,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
        path: Path | None = None,
    ):
        self.policy = policy
        self.name = name
        self._clock = clock
        self._path = path
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probes = 0

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """This process's lock, and the home's state around one decision."""
        with self._lock:
            if self._path is None:
                yield
                return
            handle = _open_state(self._path)
            if handle is None:  # the state cannot be kept here: this process decides alone
                yield
                return
            with handle:
                _flock(handle)
                self._read(handle)
                before = self._snapshot()
                yield
                if self._snapshot() != before:
                    self._write(handle)

    def _snapshot(self) -> tuple[str, int, float, int]:
        return (self._state.value, self._failures, self._opened_at, self._probes)

    def _read(self, handle: IO[str]) -> None:
        handle.seek(0)
        try:
            data = json.loads(handle.read() or "{}")
            state = BreakerState(data.get("state", "closed"))
            failures, opened_at, probes = int(data["failures"]), float(data["opened_at"]), int(data["probes"])
        except (ValueError, KeyError, TypeError):
            state, failures, opened_at, probes = BreakerState.CLOSED, 0, 0.0, 0
        self._state, self._failures, self._opened_at, self._probes = state, failures, opened_at, probes

    def _write(self, handle: IO[str]) -> None:
        handle.seek(0)
        handle.truncate()
        state, failures, opened_at, probes = self._snapshot()
        handle.write(
            json.dumps({"state": state, "failures": failures, "opened_at": opened_at, "probes": probes})
        )
        handle.flush()

    @property
    def state(self) -> BreakerState:
        with self._held():
            self._advance()
            return self._state

    def _advance(self) -> None:
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self.policy.recovery_s:
            self._state = BreakerState.HALF_OPEN
            self._probes = 0

    def before(self) -> None:
        """Admit a call or raise ``CircuitOpen``."""
        with self._held():
            self._advance()
            if self._state is BreakerState.OPEN:
                wait = self.policy.recovery_s - (self._clock() - self._opened_at)
                raise CircuitOpen(
                    f"the model service {self.name} failed repeatedly; not calling it for {wait:.0f}s more",
                    retry_in_s=round(wait, 3),
                )
            if self._state is BreakerState.HALF_OPEN:
                if self._probes >= self.policy.half_open_probes:
                    raise CircuitOpen(f"the model service {self.name} is being probed; try again shortly")
                self._probes += 1

    def success(self) -> None:
        with self._held():
            self._state = BreakerState.CLOSED
            self._failures = 0

    def failure(self) -> None:
        with self._held():
            self._failures += 1
            if self._state is BreakerState.HALF_OPEN or self._failures >= self.policy.failure_threshold:
                self._state = BreakerState.OPEN
                self._opened_at = self._clock()


def breakers_dir(home: Path) -> Path:
    """Where a home's circuit breakers keep their state, shared by its processes."""
    return home / "state" / "breakers"


def _open_state(path: Path) -> IO[str] | None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    return os.fdopen(fd, "r+", encoding="utf-8")


def _flock(handle: IO[str]) -> None:
    try:
        import fcntl
    except ImportError:  # Windows: decisions of concurrent processes may interleave (a lost count)
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released when the file closes


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, ModelConnectionError):
        return True
    return isinstance(exc, ModelHTTPError) and exc.data.get("status") in RETRY_STATUSES


@dataclass(slots=True)
class Resilience:
    """Retry + breaker for one base URL."""

    retry: RetryPolicy
    breaker: CircuitBreaker
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    attempts: int = field(default=0)

    def _wait(self, state: RetryCallState) -> float:
        from tenacity import wait_random_exponential

        exc = state.outcome.exception() if state.outcome is not None else None
        after = exc.data.get("retry_after") if isinstance(exc, ModelError) else None
        if isinstance(after, int | float) and after >= 0:
            return min(float(after), self.retry.max_retry_after_s)
        return wait_random_exponential(multiplier=self.retry.base_delay_s, max=self.retry.max_delay_s)(state)

    def _should_retry(self, exc: BaseException) -> bool:
        if not retryable(exc):
            return False
        after = exc.data.get("retry_after") if isinstance(exc, ModelError) else None
        return not (isinstance(after, int | float) and after > self.retry.max_retry_after_s)

    def _retry(self, state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome is not None else None
        if exc is None or not self._should_retry(exc):
            return False
        # A service that did not answer in time is tried once more (a local server's prompt cache may
        # have filled meanwhile), not max_attempts times: a hung server would hold a run for an hour.
        timed_out = isinstance(exc, ModelError) and bool(exc.data.get("timed_out"))
        return not (timed_out and state.attempt_number >= 2)

    async def call(self, attempt: Callable[[], Awaitable[T]]) -> T:
        from tenacity import AsyncRetrying, stop_after_attempt

        async def guarded() -> T:
            self.breaker.before()
            self.attempts += 1
            try:
                value = await attempt()
            except ModelError as exc:
                # Only failures that say the service is unwell count; a refusal or a bad key does not.
                if retryable(exc):
                    self.breaker.failure()
                raise
            self.breaker.success()
            return value

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.max_attempts),
            wait=self._wait,
            retry=self._retry,
            sleep=self.sleep,
            reraise=True,
        )
        return await retrying(guarded)


class ResilienceRegistry:
    """One ``Resilience`` per base URL, so every session talking to a service shares its breaker.

    Hold one per process (the runtime owns it): two registries would give one service two breakers."""

    def __init__(
        self,
        retry: RetryPolicy | None = None,
        breaker: BreakerPolicy | None = None,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        state_dir: Path | None = None,
    ) -> None:
        """``state_dir``: where breakers keep their state for every process of a home (the runtime
        passes ``<home>/state/breakers``); without it each process has its own."""
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or BreakerPolicy()
        self._clock = clock or (time.time if state_dir is not None else time.monotonic)
        self._state_dir = state_dir
        self._sleep = sleep
        self._by_url: dict[str, Resilience] = {}
        self._lock = threading.Lock()

    def for_url(self, base_url: str) -> Resilience:
        key = base_url.rstrip("/")
        with self._lock:
            found = self._by_url.get(key)
            if found is None:
                path = None
                if self._state_dir is not None:
                    path = self._state_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
                found = Resilience(
                    retry=self.retry,
                    breaker=CircuitBreaker(self.breaker, name=key, clock=self._clock, path=path),
                    sleep=self._sleep,
                )
                self._by_url[key] = found
            return found
