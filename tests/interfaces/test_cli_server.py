"""The ``tether`` command through its CLI server: the same command, faster, with nothing else changed.

Every test runs the installed ``tether`` script (the thin client) as a real process against a real
server in a private runtime folder, and compares with the same command run in its own process
(``TETHER_CLI_SERVER=0``) where there is something to compare.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import ROOT, exited, wait_for
from tether.execution.protocol import ExecutionPaths, read_exit, read_request
from tether.interfaces import handoff

TETHER = Path(sys.executable).with_name("tether")
SUPPORT = "tests.support.registry:registry"
IDS = re.compile(rb"\b[0-9a-f]{19}\b")
DURATION = re.compile(rb'"duration_seconds":\s*[0-9.e-]+|\b[0-9]+\.[0-9]+ s\b')


class Served:
    """A private runtime folder (so a private server) and ways to run ``tether`` against it."""

    def __init__(self, runtime: Path, **env: str) -> None:
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.runtime = runtime
        self.extra = {
            "XDG_RUNTIME_DIR": str(runtime),
            "TETHER_REGISTRY": SUPPORT,
            "TETHER_STOP_GRACE_COOPERATIVE_S": "0.5",
            "TETHER_STOP_GRACE_INTERRUPT_S": "0.5",
            **env,
        }
        self.socket: str | None = None

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, **self.extra, **extra}

    def run(self, *args: str, timeout: float = 60.0, **env: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(TETHER), *args], capture_output=True, timeout=timeout, env=self.env(**env), cwd=ROOT
        )

    def popen(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [str(TETHER), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=self.env(**env),
            cwd=ROOT,
        )

    def status(self) -> dict[str, Any]:
        done = self.run("server", "status", "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def start(self) -> int:
        """Run a command (which starts a server in the background) and wait until it serves."""
        assert self.run("tasks", "--json").returncode == 0
        return wait_for(self.serving, timeout=60, what="the CLI server to serve")

    def state(self) -> tuple[int | None, str]:
        """The server's pid and state, read from its lock file as ``tether server status`` reads it. Only
        the socket's path is asked of that command, once: it depends on the command's interpreter."""
        if self.socket is None:
            self.socket = str(self.status()["socket"])
        return handoff.server_state(self.socket)

    def pid(self) -> int | None:
        return self.state()[0]

    def serving(self) -> int | None:
        pid, state = self.state()
        return pid if state == "serving" else None

    def stop(self) -> None:
        pid = self.pid()
        self.run("server", "stop")
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # what stop may have left: spares, nothing else of ours


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = Served(tmp_path_factory.mktemp("run"))
    server.start()
    yield server
    server.stop()


def normalized(data: bytes) -> bytes:
    return DURATION.sub(b"<duration>", IDS.sub(b"<id>", data))


COMMANDS = [
    ("--help",),
    ("tasks",),
    ("tasks", "--json"),
    ("tasks", "--caller", "nobody", "--json"),
    ("task", "run", "t.quick", "--json"),
    ("task", "run", "t.quick"),
    ("task", "run", "t.raises", "--json"),
    ("task", "run", "t.nope"),
    ("task", "run", "t.checks_params", "-p", "count=many", "--json"),
    ("task", "run", "t.destroys", "--json"),
    ("task", "run"),
    ("job", "status", "0000000000000000000", "--json"),
    ("job", "stop", "no such job"),
    ("bogus",),
    ("--home", "", "tasks"),
]


def test_a_command_says_the_same_through_the_server_as_in_its_own_process(
    served: Served, tmp_path: Path
) -> None:
    for args in COMMANDS:
        here = served.run(*args, TETHER_HOME=str(tmp_path / "a"), TETHER_CLI_SERVER="0")
        there = served.run(*args, TETHER_HOME=str(tmp_path / "b"))
        assert there.returncode == here.returncode, (args, there.stderr)
        assert normalized(there.stdout) == normalized(here.stdout), (args, there.stdout, here.stdout)
        assert normalized(there.stderr) == normalized(here.stderr), (args, there.stderr, here.stderr)


def test_commands_and_their_workers_are_children_of_the_server(served: Served, home: Path) -> None:
    server = served.pid()
    inline = json.loads(served.run("task", "run", "t.ids_inline", "--json", TETHER_HOME=str(home)).stdout)
    assert inline["data"]["ppid"] == server  # the command ran in a child of the server
    worker = json.loads(served.run("task", "run", "t.ids", "--json", TETHER_HOME=str(home)).stdout)
    assert worker["status"] == "completed" and worker["data"]["ppid"] == server
    # The server reaped its worker (no zombie left) and wrote its exit code where the executor looks.
    wait_for(lambda: not Path(f"/proc/{worker['data']['pid']}").exists(), what="the worker to be reaped")
    paths = ExecutionPaths(home / "executions" / worker["execution_id"])
    assert read_exit(paths) == 0


def test_a_spare_starts_warm_and_never_warms_again(served: Served, home: Path) -> None:
    """The server runs its warm-up once; every command runs in a spare forked from it, which must not
    run it again (it was most of a served command's CPU). The count the warm-up leaves in the image
    says how often it ran in a command's ancestry."""
    server = served.pid()
    for _ in range(3):  # the spare raised at start, then ones raised after a command
        done = served.run("task", "run", "t.warm_ups", "--json", TETHER_HOME=str(home))
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)["data"]
        assert data["ppid"] == server and data["warm_ups"] == 1, data
        # Typer's click command too was built once, in the server (it was half a command's CPU).
        assert data["command_builds"] == 1, data
    alone = served.run("task", "run", "t.warm_ups", "--json", TETHER_HOME=str(home), TETHER_CLI_SERVER="0")
    data = json.loads(alone.stdout)["data"]
    assert data["warm_ups"] is None and data["command_builds"] == 1  # no server: built by the command


def test_the_command_gets_the_clients_folder_and_environment(served: Served, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()

    def run(**env: str) -> list[str]:
        done = subprocess.run(
            [str(TETHER), "--home", "relative-home", "task", "run", "t.environment", "--json"],
            capture_output=True,
            env=served.env(TETHER_ALLOWED_EXTRA="1", **env),
            cwd=workdir,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["data"]["names"]

    served_names = run()
    assert (workdir / "relative-home" / "executions").is_dir()  # --home is read from the client's folder
    assert run(TETHER_CLI_SERVER="0") == served_names  # the worker's environment is the same either way
    assert "TETHER_ZYGOTE_SOCKET" not in served_names


def test_exit_statuses_and_signals_reach_the_client(served: Served, home: Path) -> None:
    def interrupted(**env: str) -> tuple[int, bytes]:
        marks = home / "acted"
        marks.unlink(missing_ok=True)
        proc = served.popen("task", "run", "t.marks_and_waits", "--json", TETHER_HOME=str(home), **env)
        wait_for(marks.exists, what="the task to start")
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the client forwards it to the command
        out, _ = proc.communicate(timeout=60)
        return proc.returncode, out

    code_here, out_here = interrupted(TETHER_CLI_SERVER="0")
    code_there, out_there = interrupted()
    assert code_there == code_here != 0
    assert json.loads(out_there)["status"] == json.loads(out_here)["status"] == "stopped"

    # A command that dies by a signal makes its client die by the same signal.
    marks = home / "acted"
    marks.unlink()
    proc = served.popen("task", "run", "t.marks_and_waits", "--json", TETHER_HOME=str(home))
    wait_for(marks.exists, what="the task to start")
    command = _command_pid(home)
    assert command != proc.pid and _parent(command) == served.pid()
    os.kill(command, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_killing_the_client_ends_its_command_and_the_job_it_follows(served: Served, home: Path) -> None:
    marks = home / "acted"
    proc = served.popen("task", "run", "t.marks_and_waits", "--json", TETHER_HOME=str(home))
    wait_for(marks.exists, what="the task to start")
    command = _command_pid(home)
    assert _parent(command) == served.pid()
    proc.kill()  # the person's process is gone: so is the command, as if it had run there
    proc.communicate(timeout=10)
    wait_for(lambda: exited(command), what="the command to end with its client")
    listed = wait_for(
        lambda: [
            row
            for row in json.loads(served.run("job", "list", "--json", TETHER_HOME=str(home)).stdout)
            if row["status"] not in ("pending", "running")
        ],
        timeout=30,
        what="the job to end",
    )
    assert listed[0]["task_id"] == "t.marks_and_waits"


def test_a_server_that_goes_away_mid_command_is_one_clear_line(tmp_path: Path) -> None:
    own = Served(tmp_path / "run")
    try:
        server = own.start()
        home = tmp_path / "home"
        proc = own.popen("task", "run", "t.marks_and_waits", TETHER_HOME=str(home))
        wait_for((home / "acted").exists, what="the task to start")
        command = _command_pid(home)
        assert _parent(command) == server  # it runs in the server, not in the client
        os.kill(server, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 1
        assert err.decode().strip().splitlines() == [
            "error: the command's process ended without saying how (the tether server went away)"
        ]
        wait_for(lambda: exited(command), what="the orphaned command to end with its client")
        assert own.run("tasks", "--json").returncode == 0  # the next command runs (and starts a new one)
        assert wait_for(own.serving, timeout=60, what="a new server") != server
    finally:
        own.stop()


def test_a_progress_bar_on_a_terminal_through_the_server(served: Served, home: Path) -> None:
    demo = {"TETHER_REGISTRY": "tether.toolkits.demo.registry:registry", "TETHER_HOME": str(home)}
    assert served.run("task", "run", "demo.start_game", **_env(demo)).returncode == 0
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [str(TETHER), "task", "run", "demo.farm_instance", "-p", "instance_type=拟造花萼（金）",
         "-p", "instance_name=藏珍之蕾", "-p", "attempts=3"],
        stdout=follower, stderr=follower, stdin=subprocess.DEVNULL, cwd=ROOT,
        env=served.env(**demo, TETHER_DEMO_STEP_S="0.3", COLUMNS="100"),
    )  # fmt: skip
    os.close(follower)
    chunks = []
    with contextlib.suppress(OSError):
        while chunk := os.read(leader, 4096):
            chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert "attempt 2/3" in screen and "completed" in screen
    assert "\x1b[" in screen  # a terminal stays a terminal: rich drew a live bar, not plain lines
    served.run("task", "run", "demo.exit_game", **_env(demo))


def test_concurrent_commands_each_get_their_own_process(served: Served, home: Path) -> None:
    procs = [served.popen("task", "run", "t.ids_inline", "--json", TETHER_HOME=str(home)) for _ in range(6)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out)["data"])
    assert len({r["pid"] for r in results}) == 6
    assert {r["ppid"] for r in results} == {served.pid()}


def test_a_changed_module_gets_a_fresh_server(tmp_path: Path) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    module = mods / "usertasks.py"

    def write(description: str) -> None:
        module.write_text(
            textwrap.dedent(f"""
            from tether.tasks.spec import CLI, Isolation, Registry, TaskSpec

            registry = Registry("usertasks:registry")
            registry.add(TaskSpec(task_id="u.hello", handler="usertasks:hello", description={description!r},
                                  isolation=Isolation.INLINE, resources=(), exposed_to=frozenset({{CLI}})))


            def hello(ctx):
                return {description!r}
            """)
        )

    write("first")
    own = Served(tmp_path / "run", TETHER_REGISTRY="usertasks:registry", TETHER_HOME=str(tmp_path / "home"))
    own.extra["PYTHONPATH"] = os.pathsep.join([str(mods), os.environ["PYTHONPATH"]])
    try:
        first = own.start()
        assert json.loads(own.run("task", "run", "u.hello", "--json").stdout)["message"] == "first"
        write("second")
        os.utime(module, (module.stat().st_atime, module.stat().st_mtime + 2))
        listed = {t["task_id"]: t for t in json.loads(own.run("tasks", "--json").stdout)}
        assert listed["u.hello"]["description"] == "second"
        assert json.loads(own.run("task", "run", "u.hello", "--json").stdout)["message"] == "second"
        wait_for(lambda: exited(first), what="the stale server to retire")
        second = wait_for(own.serving, timeout=60, what="a fresh server")
        assert second != first
        done = own.run("task", "run", "u.hello", "--json")  # through the fresh server
        assert json.loads(done.stdout)["message"] == "second"
    finally:
        own.stop()


def test_no_socket_where_others_could_reach_it_or_the_path_is_too_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    from tether.interfaces import handoff as client

    shared = tmp_path / "shared"
    (shared / f"tether-{os.getuid()}").mkdir(parents=True)
    (shared / f"tether-{os.getuid()}").chmod(0o755)  # others could enter: no place for our socket
    deep = tmp_path / ("d" * 90)
    # Short whatever the runner's tmp_path is (pytest-xdist's is longer): the socket path must fit.
    private = Path(tempfile.mkdtemp(prefix="tp-"))
    request.addfinalizer(lambda: shutil.rmtree(private, ignore_errors=True))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(shared))
    monkeypatch.setenv("TMPDIR", str(deep))  # its socket path would not fit in sun_path
    monkeypatch.setattr(client, "LAST_RESORT", str(private))
    path = client.server_socket()
    assert path is not None and path.startswith(str(private / f"tether-{os.getuid()}"))
    assert (private / f"tether-{os.getuid()}").stat().st_mode & 0o777 == 0o700
    assert not list((shared / f"tether-{os.getuid()}").iterdir()) and not deep.exists()
    monkeypatch.setattr(client, "LAST_RESORT", str(shared))
    assert client.server_socket() is None  # then the command runs in its own process
    monkeypatch.setenv("TETHER_CLI_SERVER", "0")
    monkeypatch.setattr(client, "LAST_RESORT", str(private))
    assert client.server_socket() is None


def test_the_client_imports_only_the_standard_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, tether.interfaces.client as c; c.server_socket();"
         "print('\\n'.join(sys.modules))"],
        capture_output=True, text=True, env={**os.environ, "TETHER_CLI_SERVER": "0"}, check=True,
    )  # fmt: skip
    loaded = set(done.stdout.split())
    assert not loaded & {"typing", "enum", "json", "pathlib", "subprocess", "pydantic", "typer", "rich"}
    assert {m for m in loaded if m.startswith("tether")} == {
        "tether",
        "tether.interfaces",
        "tether.interfaces.client",
        "tether.interfaces.handoff",
    }


def test_hostile_requests_leave_the_server_serving(served: Served, home: Path, tmp_path: Path) -> None:
    path = served.status()["socket"]
    pid = served.status()["pid"]
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    import marshal

    def frame(obj: Any) -> bytes:
        body = marshal.dumps(obj)
        return len(body).to_bytes(4, "big") + body

    attempts = [
        b"",
        b"\x00",
        b"GET / HTTP/1.1\r\n\r\n",
        (2**31).to_bytes(4, "big"),
        (100).to_bytes(4, "big") + b"short",
        frame([1, 2, 3]),
        frame({"run": ["tasks"]}),  # no descriptors
        frame({"spawn": str(decoy)}),  # not an execution folder
        frame({"spawn": "relative/path"}),
        frame({"nothing": True}),
        b"\xff" * 70_000,
    ]
    for data in attempts:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(path)
            with contextlib.suppress(OSError):
                conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)
                conn.recv(4096)
        assert served.serving() == pid
    assert not list(decoy.iterdir())  # nothing was forked for it, nothing written into it
    done = served.run("task", "run", "t.quick", "--json", TETHER_HOME=str(home))
    assert done.returncode == 0 and json.loads(done.stdout)["status"] == "completed"
    assert served.status()["pid"] == pid


def test_server_stop_lets_a_running_command_finish(served: Served, home: Path) -> None:
    pid = served.pid()
    assert pid is not None
    proc = served.popen("task", "run", "t.holds_lock", "--json", TETHER_HOME=str(home))
    wait_for(lambda: list((home / "executions").glob("*/request.json")), what="the command to start")
    assert served.run("server", "stop").returncode == 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and json.loads(out)["status"] == "completed", err
    assert served.status()["state"] == "off" and exited(pid)
    served.start()  # the module's server, for the tests that follow


def _env(values: dict[str, str]) -> dict[str, Any]:
    return values  # typed for ``**``: these are environment variables, never ``timeout``


def _command_pid(home: Path) -> int:
    """The process of the command that started the one running execution in ``home``."""
    requests = wait_for(lambda: list((home / "executions").glob("*/request.json")), what="a request")
    newest = max(requests, key=lambda p: p.stat().st_mtime)
    return read_request(ExecutionPaths(newest.parent)).parent_pid


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
