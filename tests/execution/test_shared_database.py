"""Two tether homes (installations) on one database: each acts only on its own jobs.

Home B's commands run in a PID namespace of their own (``unshare --pid --fork --mount-proc``), so home
A's processes are invisible to them, exactly as they are to another host. What must hold: B lists A's
jobs read-only, with the host they run on, and never records them ended; B's ``job stop`` / ``job
status`` of one of A's jobs says where it runs, exits non-zero and does nothing; B's pruning and
start-up leave A's rows alone; A can always stop its own job, and its worker ends. The same on a
SQLite file both homes point to, and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, exited, wait_for

REGISTRY = "tests.support.registry:registry"

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")


@dataclass
class Homes:
    a: Path
    b: Path
    env: dict[str, str]
    workers: list[int] = field(default_factory=list)

    def cli(
        self, home: Path, *args: str, isolated: bool = False, timeout: float = 60.0
    ) -> tuple[int, str, str]:
        """A tether command of ``home``; ``isolated``: in a PID namespace of its own (another host, as far
        as processes go)."""
        command = [sys.executable, "-m", "tether.interfaces.cli", "--registry", REGISTRY, *args]
        if isolated:
            command = ["unshare", "--pid", "--fork", "--mount-proc", *command]
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, "TETHER_HOME": str(home)},
            cwd=ROOT,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def json(self, home: Path, *args: str, isolated: bool = False) -> object:
        code, out, err = self.cli(home, *args, "--json", isolated=isolated)
        assert code == 0, (code, out, err)
        return json.loads(out)

    def job(self, home: Path, execution_id: str) -> dict[str, object]:
        found = self.json(home, "job", "status", execution_id)
        assert isinstance(found, dict)
        return found


def _isolation_works() -> bool:
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


@pytest.fixture
def homes(tmp_path: Path, database_url: str) -> Iterator[Homes]:
    if not _isolation_works():
        pytest.skip("unshare --pid needs privileges this machine does not give")
    from sqlalchemy.engine import URL, make_url

    url = make_url(database_url)
    env = {
        **os.environ,
        "TETHER_CLI_SERVER": "0",  # one shared CLI server would run B's commands outside B's namespace
        "TETHER_STOP_GRACE_COOPERATIVE_S": "2",
        "TETHER_STOP_GRACE_INTERRUPT_S": "2",
    }
    if url.password is not None:
        env["TETHER_API_KEY_DATABASE"] = url.password  # never in settings.toml
    written = URL.create(
        url.drivername, username=url.username, host=url.host, port=url.port, database=url.database
    ).render_as_string(hide_password=False)
    made = []
    for name in ("a", "b"):
        home = tmp_path / name
        home.mkdir()
        (home / "settings.toml").write_text(f'[store]\ndatabase_url = "{written}"\n')
        made.append(home)
    homes = Homes(a=made[0], b=made[1], env=env)
    yield homes
    for pid in homes.workers:  # nothing of the test outlives it, whatever the store says
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _start_loop(homes: Homes) -> dict[str, object]:
    """A background job of home A that runs until it is stopped; its status as A sees it."""
    code, out, err = homes.cli(homes.a, "task", "run", "t.loops", "--detach", "--json")
    assert code == 0, (out, err)
    started = json.loads(out)
    assert started["status"] == "running", started
    homes.workers.append(int(started["data"]["pid"]))
    return homes.job(homes.a, started["execution_id"])


def test_listing_from_another_home_never_ends_a_live_job_and_its_own_home_still_stops_it(
    homes: Homes,
) -> None:
    job = _start_loop(homes)
    eid, pid = str(job["execution_id"]), int(job["data"]["pid"])  # type: ignore[index]

    listed = homes.json(homes.b, "job", "list", isolated=True)
    assert isinstance(listed, list)
    seen = {j["execution_id"]: j for j in listed}
    assert seen[eid]["status"] == "running", seen[eid]
    elsewhere = seen[eid]["data"]["elsewhere"]
    assert elsewhere["host"] == socket.gethostname()
    # B's start-up recovery ran too (every command maintains its home): A's job is A's.
    assert homes.job(homes.a, eid)["status"] == "running"
    code, out, _ = homes.cli(homes.b, "job", "list", isolated=True)
    assert code == 0 and eid in out and socket.gethostname() in out, out

    stopped = homes.json(homes.a, "job", "stop", eid)
    assert isinstance(stopped, dict)
    assert stopped["status"] == "stopped", stopped
    wait_for(lambda: exited(pid), what="A's worker to end")


def test_stop_or_status_from_another_home_says_where_the_job_runs_and_does_nothing(homes: Homes) -> None:
    job = _start_loop(homes)
    eid, pid = str(job["execution_id"]), int(job["data"]["pid"])  # type: ignore[index]

    for action in ("stop", "status"):
        code, out, err = homes.cli(homes.b, "job", action, eid, isolated=True)
        assert code != 0, (action, out, err)
        said = out + err
        assert socket.gethostname() in said and "stop it there" in said, (action, said)
        code, out, err = homes.cli(homes.b, "job", action, eid, "--json", isolated=True)
        assert code != 0, (action, out, err)
        document = json.loads(out)
        assert document["data"]["elsewhere"]["host"] == socket.gethostname(), document
        assert document["status"] == "running", document

    assert not exited(pid)
    assert not (homes.a / "executions" / eid / "stop.requested").exists()
    assert homes.job(homes.a, eid)["status"] == "running"


def test_pruning_from_another_home_leaves_its_rows_and_folders(homes: Homes) -> None:
    code, out, err = homes.cli(homes.a, "task", "run", "t.quick", "--json")
    assert code == 0, (out, err)
    theirs = json.loads(out)["execution_id"]
    own = []
    for _ in range(2):
        code, out, err = homes.cli(homes.b, "task", "run", "t.quick", "--json", isolated=True)
        assert code == 0, (out, err)
        own.append(json.loads(out)["execution_id"])

    pruned = homes.json(homes.b, "job", "prune", "--keep", "1", isolated=True)
    assert isinstance(pruned, dict)
    assert pruned["executions"] == 1, pruned  # B's older job: A's is not B's to count or remove
    assert homes.job(homes.a, theirs)["status"] == "completed"
    assert (homes.a / "executions" / theirs).is_dir()
    assert homes.cli(homes.b, "job", "status", own[0], isolated=True)[0] == 2
    assert homes.cli(homes.b, "job", "status", own[1], isolated=True)[0] == 0
