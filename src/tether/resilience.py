"""Retry and circuit breaking for services, shared per key (a model's base URL) by everything that
holds one ``ResilienceRegistry`` (the runtime of a tether home owns one).

Retry (tenacity) on 408/429/500/502/503/504 and on connection failures, with exponential backoff and
full jitter, honouring ``Retry-After``; never on a permanent content-policy refusal or another 4xx.
A circuit breaker per base URL: CLOSED → (``failure_threshold`` consecutive failures) → OPEN →
(``recovery_s`` later) → HALF_OPEN, where ``half_open_probes`` trial calls decide CLOSED or OPEN again.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

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
    """Thread-safe; ``clock`` is injectable so tests move time instead of waiting for it."""

    def __init__(self, policy: BreakerPolicy, *, name: str = "", clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self.name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probes = 0

    @property
    def state(self) -> BreakerState:
        with self._lock:
            self._advance()
            return self._state

    def _advance(self) -> None:
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self.policy.recovery_s:
            self._state = BreakerState.HALF_OPEN
            self._probes = 0

    def before(self) -> None:
        """Admit a call or raise ``CircuitOpen``."""
        with self._lock:
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
        with self._lock:
            self._state = BreakerState.CLOSED
            self._failures = 0

    def failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._state is BreakerState.HALF_OPEN or self._failures >= self.policy.failure_threshold:
                self._state = BreakerState.OPEN
                self._opened_at = self._clock()


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

    async def call(self, attempt: Callable[[], Awaitable[T]]) -> T:
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

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
            retry=retry_if_exception(self._should_retry),
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
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or BreakerPolicy()
        self._clock = clock
        self._sleep = sleep
        self._by_url: dict[str, Resilience] = {}
        self._lock = threading.Lock()

    def for_url(self, base_url: str) -> Resilience:
        key = base_url.rstrip("/")
        with self._lock:
            found = self._by_url.get(key)
            if found is None:
                found = Resilience(
                    retry=self.retry,
                    breaker=CircuitBreaker(self.breaker, name=key, clock=self._clock),
                    sleep=self._sleep,
                )
                self._by_url[key] = found
            return found
