"""Shared fixtures: a fresh tether home per test, short grace periods, executors that clean up."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
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


# A suite started under nohup (or by a CI runner that ignores SIGHUP) would pass that on to every command
# a test starts, which then rightly keeps ignoring it: the tests that hang a command up would wait forever.
signal.signal(signal.SIGHUP, signal.SIG_DFL)

# Each test process gets its own CLI server (``tether_cli`` hands commands to it): a private runtime folder,
# so no test meets the person's own server or another test process's, and the server is stopped at the end.
_RUNTIME = Path(tempfile.gettempdir()) / f"tether-tests-{os.getpid()}"
_RUNTIME.mkdir(mode=0o700, exist_ok=True)
os.environ["XDG_RUNTIME_DIR"] = str(_RUNTIME)


def _stop_cli_server() -> None:
    import shutil
    import subprocess

    from tests.support.helpers import CLI

    subprocess.run([*CLI, "server", "stop"], capture_output=True, timeout=60, check=False)
    shutil.rmtree(_RUNTIME, ignore_errors=True)


# No test may reach a real model service; loopback servers of the tests themselves are allowed.
os.environ["TETHER_ALLOW_MODEL_REQUESTS"] = "0"


@pytest.fixture
def receiver() -> Iterator[object]:
    """A real OTLP/HTTP traces endpoint on 127.0.0.1 (``tests/support/otlp.py``)."""
    from tests.support.otlp import Receiver

    found = Receiver()
    yield found
    found.close()


@pytest.fixture
def fake_openai() -> Iterator[object]:
    from tests.support.fake_openai import FakeOpenAI

    server = FakeOpenAI()
    yield server
    server.close()


# The tether processes a test may leave behind on purpose or by failing: a demo game, a detached
# worker and the fork server that started it, a `tether worker` or `tether serve` of a failed test.
_LEFTOVERS = ("tether.toolkits.demo.game", "tether.execution.worker", "tether.execution.forkserver",
              "tether.interfaces.cli")  # fmt: skip


@pytest.fixture(scope="session", autouse=True)
def _no_tether_process_outlives_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The demo game a test started in a home of its own (the README's tours, a module's served home)
    outlives its test by design (a person's game keeps running), and so does a detached job's worker
    when a test fails before it stops it: this test process kills every tether process whose home lies
    under its temporary folders (in its arguments or its TETHER_HOME). Six workers of a failed run went
    on using the machine for 38 minutes before, and loaded the next run."""
    yield
    import psutil

    base = str(tmp_path_factory.getbasetemp())
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        command = any(os.path.basename(arg) == "tether" for arg in cmdline[:2])  # `tether worker`, …
        if proc.info["pid"] in mine or not (command or any(w in arg for arg in cmdline for w in _LEFTOVERS)):
            continue
        with contextlib.suppress(psutil.Error):
            ours = any(_under(arg, base) for arg in cmdline)
            if ours or _under(proc.environ().get("TETHER_HOME", ""), base):
                proc.kill()


def _under(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


@pytest.fixture(autouse=True)
def _test_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's own keyring backend (a file under tmp_path, shared with subprocesses), so credential
    code runs for real; no plaintext backend is installed anywhere."""
    from tests.support.keyring_backend import FILE_ENV

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "tests.support.keyring_backend.TestKeyring")
    monkeypatch.setenv(FILE_ENV, str(tmp_path / "test-keyring.json"))
    import keyring.core

    keyring.core.set_keyring(keyring.core.load_keyring("tests.support.keyring_backend.TestKeyring"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.support.figures import FIGURES

    if _PG_SKIPPED:
        terminalreporter.section("NOT TESTED ON POSTGRESQL", sep="!", red=True, bold=True)
        terminalreporter.write_line(
            f"{len(_PG_SKIPPED)} store tests did not run on PostgreSQL: {pg_problem()}. "
            f"Start a server (.ci/run does) or set {PG_URL_ENV}."
        )
    if FIGURES:
        terminalreporter.section("fault injection figures")
        for name in sorted(FIGURES):
            terminalreporter.write_line(f"{name}: {FIGURES[name]}")


# -- databases: every store test runs on SQLite and on a real PostgreSQL -----------------------------

PG_URL_ENV = "TETHER_TEST_PG_URL"
PG_REQUIRED_ENV = "TETHER_TEST_REQUIRE_PG"
PG_URL = os.environ.get(PG_URL_ENV, "postgresql+psycopg://tether:tether@127.0.0.1:5432/tether_test")
_PG_SKIPPED: list[str] = []


def _pg_problem() -> str | None:
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    from sqlalchemy.engine import make_url

    url = make_url(PG_URL)
    try:
        psycopg.connect(
            host=url.host, port=url.port or 5432, user=url.username, password=url.password,
            dbname=url.database, connect_timeout=2,
        ).close()  # fmt: skip
    except psycopg.Error as exc:
        return f"no PostgreSQL at {url.render_as_string()} ({str(exc).splitlines()[0][:120]})"
    return None


_PG_PROBLEM: list[str | None] = []


def pg_problem() -> str | None:
    if not _PG_PROBLEM:
        _PG_PROBLEM.append(_pg_problem())
    return _PG_PROBLEM[0]


@contextlib.contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database for one test; dropped afterwards."""
    import secrets

    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(PG_URL)
    name = f"tether_t_{secrets.token_hex(6)}"
    admin = psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, password=url.password,
        dbname=url.database, autocommit=True,
    )  # fmt: skip
    from psycopg import sql

    try:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.close()


@contextlib.contextmanager
def pg_home(home: Path, settings: str = "") -> Iterator[dict[str, str]]:
    """``home`` on a fresh PostgreSQL database (its settings.toml written, ``settings`` appended); yields
    the environment its commands need (the password, as tether reads it: never in the settings file).
    Skips without a server, or fails where one is required."""
    problem = pg_problem()
    if problem is not None:
        if os.environ.get(PG_REQUIRED_ENV) == "1":
            pytest.fail(f"{PG_REQUIRED_ENV}=1 but {problem}")
        pytest.skip(f"NOT TESTED ON POSTGRESQL: {problem}")
    from sqlalchemy.engine import make_url

    with fresh_pg_database() as url:
        parsed = make_url(url)
        (home / "settings.toml").write_text(
            f'[store]\ndatabase_url = "postgresql+psycopg://{parsed.username}@{parsed.host}:'
            f'{parsed.port or 5432}/{parsed.database}"\n' + settings
        )
        yield {"TETHER_API_KEY_DATABASE": parsed.password or ""}


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same store test on a SQLite file and on a real PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tether.db'}"
        return
    problem = pg_problem()
    if problem is not None and os.environ.get(PG_REQUIRED_ENV) == "1":
        pytest.fail(f"{PG_REQUIRED_ENV}=1 but {problem}")  # CI: a missing server is a failure
    if problem is not None:
        _PG_SKIPPED.append(request.node.nodeid)
        pytest.skip(f"NOT TESTED ON POSTGRESQL: {problem}; set {PG_URL_ENV} or run .ci/run")
    with fresh_pg_database() as url:
        yield url


# The one installation (tether home) the store tests act for; tests of several homes on one database
# open theirs under their own ids.
TEST_INSTALLATION = "7e57000000000001"


@pytest.fixture
def open_db(database_url: str) -> Iterator[Callable[[], object]]:
    """Open ``Database``s on the test's database; every one is closed before the database goes away."""
    from tether.store.database import Database

    opened: list[Database] = []

    def make() -> Database:
        db = Database(database_url, installation=TEST_INSTALLATION)
        opened.append(db)
        return db

    yield make
    for db in opened:
        db.close()


# -- running in parallel (make test: pytest-xdist, two workers) --------------------------------------

# Each test process has a CLI server of its own (its own runtime folder, above): a test that starts,
# stops or inspects one never meets another process's, so those tests need no worker of their own.

# Tests that run shell commands make cgroups in the one cgroup the test processes share, and a command
# ends the cgroups of dead workers there (``containment._sweep``): a test that kills a worker to leave
# its command behind must not meet another worker's command. They run one after another, on one worker.
ONE_CGROUP_PARENT = ("toolkits/shell/", "toolkits/workspace/test_home.py", "tasks/test_grants.py")


# Modules whose module-scoped fixture starts something that takes seconds (a `tether serve` with the
# states it is given, a browser, a CLI server): their tests run on one worker, so it is started once, not
# on each worker that gets one of them. The other worker meanwhile runs the rest of the suite.
ONE_MODULE_FIXTURE = frozenset(
    {
        "interfaces/web/test_page.py",
        "interfaces/web/test_page_fit.py",
        "interfaces/web/test_page_answers.py",
        "interfaces/web/test_schema.py",
        "interfaces/web/test_api.py",
        "interfaces/web/test_security.py",
        "interfaces/test_cli_server.py",
        "interfaces/test_signals_at_start.py",
    }
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        path = item.path.as_posix()
        if any(part in path for part in ONE_CGROUP_PARENT):
            item.add_marker(pytest.mark.xdist_group("cgroups"))
        elif any(path.endswith(f"/tests/{module}") for module in ONE_MODULE_FIXTURE):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
    if getattr(config.option, "loadgroup", False):  # a worker of `--dist loadgroup`
        _group_ids(items)


def _group_ids(items: list[pytest.Item]) -> None:
    """Put each test's ``xdist_group`` into its id, where the scheduler reads it, as xdist does: xdist 3.8
    sets ``item._nodeid``, which pytest 9 no longer reads (a test's id is ``item._id``), so every group was
    ignored and its tests ran on both workers at once."""
    from _pytest.nodeid import NodeId

    for item in items:
        groups = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        suffix = f"@{'_'.join(groups)}"
        if groups and not item.nodeid.endswith(suffix):  # (an xdist that still can has done it)
            item._id = NodeId.parse(item.nodeid + suffix)  # pyright: ignore[reportAttributeAccessIssue]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker hands its figures and PostgreSQL skips to the controller, which prints them."""
    _stop_cli_server()
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        from tests.support.figures import FIGURES

        output["figures"] = dict(FIGURES)
        output["pg_skipped"] = list(_PG_SKIPPED)


def pytest_testnodedown(node: object, error: object) -> None:
    from tests.support.figures import FIGURES

    output = getattr(node, "workeroutput", {})
    FIGURES.update(output.get("figures", {}))
    _PG_SKIPPED.extend(output.get("pg_skipped", []))
