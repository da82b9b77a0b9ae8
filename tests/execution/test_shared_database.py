"""Two tether homes (installations) on one database: each acts only on its own jobs.

Home B's commands run in a PID namespace of their own (``unshare --pid --fork --mount-proc``), so home
A's processes are invisible to them, exactly as they are to another host. What must hold: B lists A's
jobs read-only, with the host they run on, and never records them ended; B's ``job stop`` / ``job
status`` of one of A's jobs says where it runs, exits non-zero and does nothing; B's pruning and
start-up leave A's rows alone; A can always stop its own job, and its worker ends. The same on a
SQLite file both homes point to, and on PostgreSQL.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import exited, wait_for
from tests.support.homes import Homes, two_homes


@pytest.fixture
def homes(tmp_path: Path, database_url: str) -> Iterator[Homes]:
    with two_homes(tmp_path, database_url, "tests.support.registry:registry") as made:
        yield made


def status_of(homes: Homes, home: Path, execution_id: str) -> dict[str, object]:
    found = homes.json(home, "job", "status", execution_id)
    assert isinstance(found, dict)
    return found


def _start_loop(homes: Homes) -> dict[str, object]:
    """A background job of home A that runs until it is stopped; its status as A sees it."""
    code, out, err = homes.cli(homes.a, "task", "run", "t.loops", "--detach", "--json")
    assert code == 0, (out, err)
    started = json.loads(out)
    assert started["status"] == "running", started
    homes.workers.append(int(started["data"]["pid"]))
    return status_of(homes, homes.a, started["execution_id"])


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
    assert status_of(homes, homes.a, eid)["status"] == "running"
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
    assert status_of(homes, homes.a, eid)["status"] == "running"


EVENTS = """
import json, sys
from tether.runtime import Runtime
with Runtime.open() as rt:
    print(json.dumps(len(rt.events.read(topics=[f"job:{sys.argv[1]}"]))))
"""


def test_pruning_from_another_home_leaves_its_rows_folders_and_events(homes: Homes) -> None:
    code, out, err = homes.cli(homes.a, "task", "run", "t.quick", "--json")
    assert code == 0, (out, err)
    theirs = json.loads(out)["execution_id"]
    told = homes.python(homes.a, EVENTS, theirs)
    assert told, "A's job left no event"
    with (homes.b / "settings.toml").open("a") as settings:
        settings.write("keep_events = 1\n")  # [store]: B keeps almost none of its own events
    own = []
    for _ in range(2):
        code, out, err = homes.cli(homes.b, "task", "run", "t.quick", "--json", isolated=True)
        assert code == 0, (out, err)
        own.append(json.loads(out)["execution_id"])

    # --older-than-days 0 means what it says: every ended job (of B's; A's is not B's to count or remove).
    pruned = homes.json(homes.b, "job", "prune", "--older-than-days", "0", isolated=True)
    assert isinstance(pruned, dict)
    assert pruned["executions"] == 2, pruned
    assert status_of(homes, homes.a, theirs)["status"] == "completed"
    assert (homes.a / "executions" / theirs).is_dir()
    assert homes.cli(homes.b, "job", "status", own[0], isolated=True)[0] == 2
    assert homes.cli(homes.b, "job", "status", own[1], isolated=True)[0] == 2
    assert homes.python(homes.a, EVENTS, theirs) == told  # B's event retention counts and prunes B's
    assert homes.python(homes.b, EVENTS, own[0], isolated=True) == 0


def test_the_same_home_path_on_another_host_is_another_installation(
    tmp_path: Path, database_url: str
) -> None:
    """Two hosts that both use ~/.tether: B's home is mounted at A's path inside B's namespace."""
    with two_homes(tmp_path, database_url, "tests.support.registry:registry", same_path=True) as homes:
        started = _start_loop(homes)
        eid = str(started["execution_id"])
        listed = homes.json(homes.b, "job", "list", "--active", isolated=True)
        assert isinstance(listed, list)
        (seen,) = [j for j in listed if j["execution_id"] == eid]
        assert seen["status"] == "running" and seen["data"]["elsewhere"]["host"] == socket.gethostname()
        assert status_of(homes, homes.a, eid)["status"] == "running"
        stopped = homes.json(homes.a, "job", "stop", eid)
        assert isinstance(stopped, dict) and stopped["status"] == "stopped", stopped
