"""Hostile input for every command: one clear line (one JSON document under --json), never a traceback.

Every command runs as a real process against a home that something is wrong with — a bad registry, a
damaged, busy, read-only or full store, a bad settings file, text that is not UTF-8, input nested far
too deep — and must end with a short answer and an exit code. The audit found 14 tracebacks and 10
silently wrong outcomes in 96 such cases.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.figures import count
from tests.support.helpers import CLI, ROOT, tether_cli, wait_for

Arg = str | bytes

COMMANDS: dict[str, list[Arg]] = {
    "tasks": ["tasks", "--json"],
    "task run": ["task", "run", "demo.status", "--json"],
    "task run (params)": ["task", "run", "demo.farm_instance", "-p", "attempts=2", "--json"],
    "job list": ["job", "list", "--json"],
    "job status": ["job", "status", "1a23b1d1da22368f5cf", "--json"],
    "job stop": ["job", "stop", "1a23b1d1da22368f5cf", "--json"],
    "run": ["run", "查看游戏状态", "--json"],
    "threads": ["threads", "--json"],
    "trace": ["trace", "th-none", "--json"],
    "auth show": ["auth", "show", "openai", "--json"],
    "chat": ["chat"],
    "doctor": ["doctor", "--json"],
    "flow plan": ["flow", "plan", "启动游戏，然后刷 3 次金币副本", "--json"],
    "flow validate": ["flow", "validate", "no-such-plan.yaml", "--json"],
    "flow run": ["flow", "run", "no-such-plan.yaml", "--json"],
    "flow approve": ["flow", "approve", "run-0000000000", "exit_game-4", "--json"],
    "goal": ["goal", "飞到火星", "--json"],
    "run (formats)": ["run", "--format", "pptx,pdf", "查看游戏状态", "--json"],
    "artifacts": ["artifacts", "--json"],
    "artifacts get": ["artifacts", "get", "1", "--json"],
}


@dataclass
class Condition:
    """Something wrong with the home, the environment or the arguments."""

    name: str
    setup: Callable[[Path], dict[str, str]] = lambda home: {}
    replace_args: Callable[[list[Arg]], list[Arg]] | None = None
    commands: tuple[str, ...] = tuple(COMMANDS)
    must_fail: bool = False  # every command must exit non-zero (nothing may proceed as if all were well)
    exempt: tuple[str, ...] = ()  # commands that do not use what is wrong, so may succeed
    notes: list[str] = field(default_factory=list)


NO_REGISTRY = ("threads", "trace", "auth show", "artifacts", "artifacts get")  # never load the registry


def _write(relative: str, text: str | bytes) -> Callable[[Path], dict[str, str]]:
    def setup(home: Path) -> dict[str, str]:
        path = home / relative
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return {}

    return setup


def _env(**env: str) -> Callable[[Path], dict[str, str]]:
    return lambda home: env


def _store_dir(home: Path) -> dict[str, str]:
    (home / "tether.db").mkdir()
    return {}


def _locked_store(home: Path) -> dict[str, str]:
    """Another process holds the store's write lock for the whole case."""
    code = (
        "import sqlite3, sys, time\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA journal_mode=WAL'); c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True); sys.stdin.read()\n"
    )
    sqlite3.connect(home / "tether.db").close()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(home / "tether.db")], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"locked"
    _LOCKERS.append(proc)
    return {"TETHER_BUSY_TIMEOUT_S": "0.2"}


_LOCKERS: list[subprocess.Popen[bytes]] = []


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _with_params(value: str) -> Callable[[list[Arg]], list[Arg]]:
    def replace(args: list[Arg]) -> list[Arg]:
        if args[:2] == ["task", "run"]:
            return ["task", "run", "demo.farm_instance", "--params", value, "--json"]
        return [*args[:-1], "-p", f"x={value}", "--json"] if args[-1] == "--json" else args

    return replace


def _non_utf8(args: list[Arg]) -> list[Arg]:
    """The first argument after the command made of bytes that are not UTF-8."""
    if len(args) == 1:
        return [*args, "--thread", b"\xff\xfebad"]
    return [args[0], *(b"\xff\xfebad" if i == 1 else a for i, a in enumerate(args[1:], start=1))]


CONDITIONS = [
    Condition(
        "registry: no such module",
        _env(TETHER_REGISTRY="nowhere.at_all:registry"),
        must_fail=True,
        exempt=NO_REGISTRY,
    ),
    Condition("registry: not a ref", _env(TETHER_REGISTRY="not a ref"), must_fail=True, exempt=NO_REGISTRY),
    Condition("registry: not a Registry", _env(TETHER_REGISTRY="os:sep"), must_fail=True, exempt=NO_REGISTRY),
    Condition(
        "registry: raises on import",
        _env(TETHER_REGISTRY="tests.support.broken_registry:registry"),
        must_fail=True,
        exempt=NO_REGISTRY,
    ),
    Condition("store: damaged", _write("tether.db", b"this is not a database" * 100)),
    Condition("store: a folder", _store_dir),
    Condition("store: busy", _locked_store),
    Condition("settings: not TOML", _write("settings.toml", "[execution\nx = ")),
    Condition("settings: unknown section", _write("settings.toml", '[modle]\nmodel = "gpt"\n')),
    Condition("settings: unknown key", _write("settings.toml", "[execution]\nparent_pol_s = 1\n")),
    Condition("settings: nan", _write("settings.toml", "[execution]\nparent_poll_s = nan\n")),
    Condition("settings: wrong type", _write("settings.toml", '[agent]\nmax_steps = "12"\n')),
    Condition("env: infinite poll", _env(TETHER_PARENT_POLL_S="inf")),
    Condition("env: empty home", _env(TETHER_HOME=""), must_fail=True),
    Condition("args: not UTF-8", replace_args=_non_utf8, must_fail=True),
    # One argument may be at most 128 KiB on Linux: deep and large, within that.
    Condition("args: JSON nested 50k deep", replace_args=_with_params(_deep(50_000))),
    Condition(
        "args: 100 KB of params", replace_args=_with_params(json.dumps({"instance_type": "x" * 100_000}))
    ),
]


FRESH = [sys.executable, "-m", "tether.interfaces.cli"]  # a fresh interpreter; CLI: through the CLI server


def run_case(
    home: Path, condition: Condition, command: str, *, cli: list[str] = FRESH
) -> tuple[str, str, list[str]]:
    """Run one command under one condition; returns (condition, command, problems)."""
    args: list[Arg] = list(COMMANDS[command])
    if condition.replace_args is not None:
        args = condition.replace_args(args)
    env = {**os.environ, "TETHER_HOME": str(home)}
    env.update(condition.setup(home) if not condition.notes else {})
    proc = subprocess.run(
        [*map(os.fsencode, cli), *(a if isinstance(a, bytes) else a.encode() for a in args)],
        input=b"exit\n",
        capture_output=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    problems = []
    if "Traceback" in out + err:
        problems.append(f"traceback: {(out + err)[-400:]}")
    if "--json" in args:
        try:
            json.loads(out)
        except ValueError:
            problems.append(f"stdout is not exactly one JSON document: {out[:200]!r}")
    if condition.must_fail and proc.returncode == 0 and command not in condition.exempt:
        problems.append(f"exit 0 although {condition.name}: {out[:200]!r}")
    if proc.returncode < 0:
        problems.append(f"died of signal {-proc.returncode}")
    return condition.name, command, problems


@contextlib.contextmanager
def fresh_home(root: Path, name: str) -> Iterator[Path]:
    home = root / name.replace(" ", "_").replace(":", "")
    home.mkdir(parents=True)
    yield home


def _fresh_sample() -> list[tuple[Condition, str]]:
    """Three commands per condition, rotating, so every command meets several conditions."""
    names = list(COMMANDS)
    return [
        (condition, name)
        for index, condition in enumerate(CONDITIONS)
        for name in (names[(3 * index + k) % len(names)] for k in range(3))
        if name in condition.commands
    ]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("how", ["through the CLI server", "in a fresh interpreter"])
def test_every_command_under_every_hostile_condition(tmp_path: Path, how: str) -> None:
    """Every pair runs as a person's ``tether`` runs it (handed to the warm CLI server, which forks it);
    a rotating sample of them also starts a fresh interpreter, the way the first command of the day and
    ``TETHER_CLI_SERVER=0`` run."""
    fresh = how == "in a fresh interpreter"
    cases = _fresh_sample() if fresh else [(c, cmd) for c in CONDITIONS for cmd in c.commands]
    cli = FRESH if fresh else CLI
    homes = [tmp_path / f"case{index}" for index in range(len(cases))]
    for home in homes:
        home.mkdir()
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(
                pool.map(lambda item: run_case(item[1], *item[0], cli=cli), zip(cases, homes, strict=True))
            )
    finally:
        for locker in _LOCKERS:
            locker.kill()
            locker.communicate()
        _LOCKERS.clear()
    count("hostile inputs tried", len(results))
    failures = [f"{condition} / {command}: {'; '.join(p)}" for condition, command, p in results if p]
    count("tracebacks", sum(1 for *_, p in results if any(x.startswith("traceback") for x in p)))
    assert failures == [], "\n".join(failures)


# -- the file system says no -----------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tiny real file system (tmpfs) that a test can fill up or make read-only."""
    mount = tmp_path / "fs"
    mount.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("NOT TESTED: mounting a tmpfs needs root and mount(8)")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"NOT TESTED: cannot mount a tmpfs here: {made.stderr.decode()[:200]}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _prepared(home: Path) -> None:
    code, out, err = tether_cli("task", "run", "demo.status", "--json", home=home)
    assert code == 0, (out, err)
    tether_cli("run", "查看游戏状态", "--thread", "th-1", home=home)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("trouble", ["read-only", "full"])
def test_a_read_only_or_full_disk_is_one_clear_line(small_fs: Path, trouble: str) -> None:
    home = small_fs / "home"
    _prepared(home)
    if trouble == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    else:
        with contextlib.suppress(OSError), open(small_fs / "filler", "wb") as filler:
            while True:
                filler.write(b"\0" * 65536)
    for command, args in COMMANDS.items():
        proc = subprocess.run(
            [*CLI, *map(str, args)],
            input="exit\n",
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "TETHER_HOME": str(home)},
        )
        count("hostile inputs tried")
        assert "Traceback" not in proc.stdout + proc.stderr, (command, proc.stderr[-600:])
        if "--json" in args:
            json.loads(proc.stdout)
    proc = subprocess.run(
        [sys.executable, "-m", "tether.interfaces.cli", "task", "run", "demo.start_game", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "TETHER_HOME": str(home)},
    )
    message = (
        json.loads(proc.stdout).get("error", {}).get("message", "") or json.loads(proc.stdout)["message"]
    )
    assert proc.returncode != 0 and ("read-only" in message or "full" in message), message


# -- settings that would silently change behaviour -----------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["task", "run", "demo.status"], {"TETHER_PARENT_POLL_S": "inf"}, "finite"),
        (["task", "run", "demo.status"], {"TETHER_FORKSERVER": "maybe"}, "boolean"),
        (["--home", "", "tasks"], {}, "empty"),
        (["task", "run", "demo.farm_instance", "-p", "attempts=true"], {}, "valid integer"),
    ],
)
def test_settings_and_values_that_would_silently_change_behaviour_are_refused(
    home: Path, args: list[str], env: dict[str, str], expected: str
) -> None:
    code, out, err = tether_cli(*args, "--json", home=home, **env)  # type: ignore[arg-type]
    assert code == 2, (out, err)
    document = json.loads(out)
    message = document["error"]["message"] if "error" in document else document["message"]
    assert expected in message, message


# -- interrupted ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interrupted_command_prints_one_json_document(home: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", "tests.support.registry:registry",
         "task", "run", "t.loops", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_STOP_GRACE_COOPERATIVE_S": "1"},
    )  # fmt: skip
    wait_for(lambda: list(home.glob("executions/*/result.json")), what="the job to run")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    count("hostile inputs tried")
    assert "Traceback" not in err
    document = json.loads(out)
    assert document.get("status") == "stopped" and proc.returncode == 1, (out, err)


def test_sigterm_ends_a_command_that_started_with_sigint_ignored(home: Path) -> None:
    """Review: `cmd &` in a script starts with SIGINT ignored; SIGTERM then did nothing."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", "tests.support.registry:registry",
         "task", "run", "t.loops", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_STOP_GRACE_COOPERATIVE_S": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    wait_for(lambda: list(home.glob("executions/*/result.json")), what="the job to run")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert json.loads(out)["status"] == "stopped" and "Traceback" not in err


def test_an_interrupt_between_the_workers_start_and_the_command_knowing_it_still_reports_the_stop(
    home: Path, tmp_path: Path
) -> None:
    """Found under load: a Ctrl-C that landed after the worker was started but before the command
    learned of it printed a bare "interrupted" (its job was left to end when it noticed its parent)."""
    reached, go = tmp_path / "reached", tmp_path / "go"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", "tests.support.registry:registry",
         "task", "run", "t.loops", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_STOP_GRACE_COOPERATIVE_S": "1",
             "TETHER_CLI_SERVER": "0", "TETHER_FAULTS": f"spawner.after_spawn=touch:{reached}+wait:{go}"},
    )  # fmt: skip
    wait_for(reached.exists, what="the command to stand between the start and knowing of it")
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: list(home.glob("executions/*/stop.requested")), what="the command to ask for a stop")
    go.touch()
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err
    document = json.loads(out)
    assert document.get("status") == "stopped" and proc.returncode == 1, (out, err)
