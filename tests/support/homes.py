"""Two tether homes (installations) on one database, the second one as if on another host.

Home B's processes run in a PID namespace of their own (``unshare --pid --fork --mount-proc``): home A's
processes are invisible to them, exactly as they are to another host. With ``same_path``, B's home is
also mounted at A's path inside B's namespace, as on two hosts that both use ``~/.tether``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.helpers import CLI, ROOT

ISOLATE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


@dataclass
class Homes:
    a: Path
    b: Path
    env: dict[str, str]
    registry: str
    same_path: bool = False
    workers: list[int] = field(default_factory=list)  # pids (and process groups) killed at the end
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)  # killed and reaped at the end

    def command(
        self, home: Path, argv: list[str], *, isolated: bool = False
    ) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of ``argv`` run for ``home`` (``isolated``: in B's namespace)."""
        env = {**self.env, "TETHER_HOME": str(home)}
        if not isolated:
            return argv, env
        if self.same_path and home == self.b:
            # B's home at A's path, visible only inside B's namespace: the same ~/.tether on another host.
            env["TETHER_HOME"] = str(self.a)
            script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
            return [*ISOLATE, "sh", "-c", script, "sh", str(self.b), str(self.a), *argv], env
        return [*ISOLATE, *argv], env

    def cli(
        self, home: Path, *args: str, isolated: bool = False, timeout: float = 120.0
    ) -> tuple[int, str, str]:
        """A tether command of ``home``: B's in a fresh interpreter in its namespace, A's as a person runs
        it (through the test process's CLI server, which lives in A's namespace)."""
        if isolated:
            argv = [sys.executable, "-m", "tether.interfaces.cli", "--registry", self.registry, *args]
            command, env = self.command(home, argv, isolated=True)
        else:
            command, env = self.command(home, [*CLI, "--registry", self.registry, *args])
            env.pop("TETHER_CLI_SERVER")
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        return proc.returncode, proc.stdout, proc.stderr

    def json(self, home: Path, *args: str, isolated: bool = False) -> object:
        code, out, err = self.cli(home, *args, "--json", isolated=isolated)
        assert code == 0, (code, out, err)
        return json.loads(out)

    def python(self, home: Path, code: str, *args: str, isolated: bool = False) -> object:
        """Run ``code`` (which prints one JSON document) with ``home``'s environment; what it printed."""
        command, env = self.command(home, [sys.executable, "-c", code, *args], isolated=isolated)
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def start(self, home: Path, *args: str, isolated: bool = False) -> subprocess.Popen[bytes]:
        """A long-lived tether command (an executor) of ``home``, killed with its whole group at the end."""
        argv = [sys.executable, "-m", "tether.interfaces.cli", "--registry", self.registry, *args]
        command, env = self.command(home, argv, isolated=isolated)
        with open(home / f"started-{len(self.started)}.log", "ab") as log:  # the child keeps its copy
            proc = subprocess.Popen(
                command,
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.started.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL a started command and its group (in B's namespace: every process of the namespace)."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def isolation_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run([*ISOLATE, "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


@contextlib.contextmanager
def two_homes(
    tmp_path: Path, database_url: str, registry: str, *, same_path: bool = False
) -> Iterator[Homes]:
    """Homes ``a`` and ``b`` whose settings point to ``database_url`` (its password, if any, in the
    environment: tether refuses one in settings.toml)."""
    if not isolation_works():
        pytest.skip("unshare --pid needs privileges this machine does not give")
    from sqlalchemy.engine import URL, make_url

    url = make_url(database_url)
    env = {
        **os.environ,
        "TETHER_CLI_SERVER": "0",  # B's own process: the test process's CLI server is outside B's namespace
        "TETHER_STOP_GRACE_COOPERATIVE_S": "2",
        "TETHER_STOP_GRACE_INTERRUPT_S": "2",
    }
    if url.password is not None:
        env["TETHER_API_KEY_DATABASE"] = url.password
    written = URL.create(
        url.drivername, username=url.username, host=url.host, port=url.port, database=url.database
    ).render_as_string(hide_password=False)
    made = []
    for name in ("a", "b"):
        home = tmp_path / name
        home.mkdir()
        (home / "settings.toml").write_text(f'[store]\ndatabase_url = "{written}"\n')
        made.append(home)
    homes = Homes(a=made[0], b=made[1], env=env, registry=registry, same_path=same_path)
    try:
        yield homes
    finally:
        for pid in homes.workers:  # nothing of the test outlives it, whatever the store says
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        for proc in homes.started:
            homes.kill(proc)
