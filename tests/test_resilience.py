"""The circuit breaker of a model service is the home's, not the process's: a dead local server found
dead by one command is not retried from scratch by the next one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tether.errors import CircuitOpen, ModelConnectionError
from tether.resilience import BreakerPolicy, BreakerState, ResilienceRegistry, RetryPolicy

URL = "http://127.0.0.1:9/v1"


def _registry(state: Path, clock: list[float]) -> ResilienceRegistry:
    return ResilienceRegistry(
        RetryPolicy(max_attempts=1),
        BreakerPolicy(failure_threshold=2, recovery_s=30.0),
        state_dir=state,
        clock=lambda: clock[0],
    )


async def _fail() -> None:
    raise ModelConnectionError("cannot reach the model service")


async def _ok() -> str:
    return "ok"


def test_two_registries_of_one_home_share_one_breaker(tmp_path: Path) -> None:
    clock = [1000.0]
    first, second = _registry(tmp_path, clock), _registry(tmp_path, clock)
    for _ in range(2):
        with pytest.raises(ModelConnectionError):
            asyncio.run(first.for_url(URL).call(_fail))
    assert second.for_url(URL).breaker.state is BreakerState.OPEN  # another process sees it open
    with pytest.raises(CircuitOpen, match="30s"):
        asyncio.run(second.for_url(URL).call(_ok))
    clock[0] += 31  # recovery: one probe; its success closes the breaker for everyone
    assert asyncio.run(second.for_url(URL).call(_ok)) == "ok"
    assert first.for_url(URL).breaker.state is BreakerState.CLOSED


def test_the_breaker_holds_across_real_processes(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import asyncio, sys
        from pathlib import Path
        from tether.errors import CircuitOpen, ModelConnectionError
        from tether.resilience import BreakerPolicy, ResilienceRegistry, RetryPolicy
        registry = ResilienceRegistry(RetryPolicy(max_attempts=1), BreakerPolicy(failure_threshold=3),
                                      state_dir=Path(sys.argv[1]))
        async def fail():
            raise ModelConnectionError("down")
        try:
            asyncio.run(registry.for_url({URL!r}).call(fail))
        except CircuitOpen:
            print("open")
        except ModelConnectionError:
            print("tried")
    """)
    seen = [
        subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        for _ in range(5)
    ]
    assert seen == ["tried", "tried", "tried", "open", "open"]


def test_a_damaged_state_file_is_a_closed_breaker(tmp_path: Path) -> None:
    clock = [0.0]
    registry = _registry(tmp_path, clock)
    with pytest.raises(ModelConnectionError):
        asyncio.run(registry.for_url(URL).call(_fail))
    for path in tmp_path.rglob("*.json"):
        path.write_text("{not json")
    assert asyncio.run(_registry(tmp_path, clock).for_url(URL).call(_ok)) == "ok"
