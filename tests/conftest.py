"""Shared fixtures: a fresh tether home per test, short grace periods, executors that clean up."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.helpers import FAST
from tether.config import Settings
from tether.execution.executor import Executor
from tether.tasks.result import TaskStatus
from tether.tasks.spec import Registry
from tether.toolkits.demo import game
from tether.toolkits.demo.registry import registry as demo_registry

ROOT = Path(__file__).resolve().parent.parent
# Workers and helper processes must be able to import tests.support.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("TETHER_HOME", str(path))
    monkeypatch.setenv("TETHER_DEMO_STEP_S", "0.02")
    (path / "parent.pid").write_text(str(os.getpid()))
    yield path
    _kill_game(path)


def _kill_game(home: Path) -> None:
    with contextlib.suppress(game.GameNotRunning):
        game.request(home, "quit")
    info = game.info_path(home)
    with contextlib.suppress(Exception):
        pid = int(__import__("json").loads(info.read_text())["pid"])
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def make_executor(home: Path) -> Iterator[Callable[..., Executor]]:
    made: list[Executor] = []

    def make(registry: Registry = demo_registry, settings: Settings = FAST, **kwargs: object) -> Executor:
        executor = Executor(registry, home=home, settings=settings, **kwargs)  # type: ignore[arg-type]
        made.append(executor)
        return executor

    yield make
    for executor in made:
        _stop_everything(executor)
        executor.close()


def _stop_everything(executor: Executor) -> None:
    import asyncio

    for record in executor.store.list(active=True):
        with contextlib.suppress(Exception):
            asyncio.run(executor.jobs.stop(record.execution_id, reason="test teardown"))


@pytest.fixture
def executor(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor()


@pytest.fixture
def support(make_executor: Callable[..., Executor]) -> Executor:
    from tests.support.registry import registry

    return make_executor(registry)


@pytest.fixture
def running_game(executor: Executor) -> Executor:
    result = executor.execute_sync("demo.start_game", caller="cli")
    assert result.status is TaskStatus.COMPLETED, result
    return executor


# No test may reach a real model service; loopback servers of the tests themselves are allowed.
os.environ["TETHER_ALLOW_MODEL_REQUESTS"] = "0"


@pytest.fixture
def fake_openai() -> Iterator[object]:
    from tests.support.fake_openai import FakeOpenAI

    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _file_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real keyring backend (a file under tmp_path), so credential code runs for real."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    import keyring.core

    keyring.core.set_keyring(keyring.core.load_keyring("keyrings.alt.file.PlaintextKeyring"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.support.figures import FIGURES

    if FIGURES:
        terminalreporter.section("fault injection figures")
        for name in sorted(FIGURES):
            terminalreporter.write_line(f"{name}: {FIGURES[name]}")
