"""The fork server warms the registry's ``preload`` modules while idle: workers forked afterwards have
them loaded already (imported once, in the server), and a module that cannot be imported is only logged."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.helpers import wait_for
from tests.support.preload_registry import registry
from tether.errors import RegistryError
from tether.execution.executor import Executor
from tether.tasks.spec import Registry


def test_workers_start_with_the_preloaded_modules_and_a_broken_one_is_logged(
    make_executor: Callable[..., Executor], home: Path
) -> None:
    executor = make_executor(registry=registry)
    first = asyncio.run(executor.execute("p.where", caller="cli"))  # starts the fork server
    assert first.ok, first
    log = home / "logs" / "forkserver.log"
    wait_for(
        lambda: log.exists() and "preloaded tests.support.preloaded" in log.read_text(), what="the preload"
    )
    assert "preloading tests.support.no_such_module failed: ModuleNotFoundError" in log.read_text()
    data = asyncio.run(executor.execute("p.where", caller="cli")).data
    assert data["preloaded_in"] is not None and data["preloaded_in"] != data["worker"]  # from the server


def test_a_preload_that_is_not_a_module_name_is_refused() -> None:
    with pytest.raises(RegistryError, match="not a module name"):
        Registry(preload=("os; import x",))


def test_a_preload_that_starts_a_thread_stops_the_warming(
    make_executor: Callable[..., Executor], home: Path
) -> None:
    from tests.support.preload_registry import threaded

    executor = make_executor(registry=threaded)
    assert asyncio.run(executor.execute("p.where", caller="cli")).ok
    log = home / "logs" / "forkserver.log"
    wait_for(
        lambda: log.exists() and "started a thread; preloading stops" in log.read_text(), what="the stop"
    )
    data = asyncio.run(executor.execute("p.where", caller="cli")).data
    assert data["preloaded_in"] is None  # nothing more was preloaded after it
