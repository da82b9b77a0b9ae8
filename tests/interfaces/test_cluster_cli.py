"""``tether cluster id|join|forget``, ``tether workers`` and ``tether worker --resources``: what a person
types to spread one installation over several hosts, and the clear refusals of what cannot be."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import ROOT, tether_cli, wait_for
from tether.installation import installation_id

FLOWS = "tests.support.flowkit:flows"


def test_a_fresh_home_joins_an_installation_and_one_that_ran_work_is_refused(
    tmp_path: Path, home: Path
) -> None:
    code, out, _ = tether_cli("cluster", "id", home=home)
    assert code == 0 and out.strip() == installation_id(home)

    fresh = tmp_path / "fresh"
    code, out, err = tether_cli("cluster", "join", installation_id(home), home=fresh)
    assert code == 0, err
    assert installation_id(fresh) == installation_id(home) and "now a node of" in out
    code, out, _ = tether_cli("cluster", "join", installation_id(home), "--json", home=fresh)
    assert code == 0 and json.loads(out)["before"] == installation_id(home)  # again: nothing changes

    code, out, _ = tether_cli("cluster", "join", "not-an-id", "--json", home=fresh)
    assert code == 2 and "16 hex digits" in json.loads(out)["error"]["message"]

    ran = tmp_path / "ran"
    code, _, err = tether_cli(
        "--registry", FLOWS, "task", "run", "f.safe", "--params", '{"key": "k"}', home=ran
    )
    assert code == 0, err
    code, out, _ = tether_cli("cluster", "join", installation_id(home), "--json", home=ran)
    assert code == 2 and "has run 1 execution" in json.loads(out)["error"]["message"]
    assert installation_id(ran) != installation_id(home)  # left as it was


def test_a_worker_owns_what_it_says_and_the_list_shows_it_and_its_hold(home: Path) -> None:
    code, out, err = tether_cli("--registry", FLOWS, "worker", "--resources", "arm,9bad", home=home)
    assert code == 2 and "'9bad' is not a resource name" in out + err

    worker = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "worker", "--resources", "arm",
         "--name", "lab-1"],
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0"}, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        said = " ".join(worker.stdout.readline() for _ in range(3))  # the terminal's width wraps it
        assert "owns arm" in " ".join(said.split()), said

        def listed() -> list[dict[str, object]] | None:
            code, out, _ = tether_cli("workers", "--json", home=home)
            rows = json.loads(out) if code == 0 else []
            return rows if rows and rows[0]["holds"] == ["arm"] else None

        rows = wait_for(listed, timeout=30, what="the worker holding the arm")
        assert rows[0]["node"] == "lab-1" and rows[0]["status"] == "alive" and rows[0]["resources"] == ["arm"]
        # A call for the arm from this node runs here (its node's worker holds it): a flock keeps them apart.
        code, out, err = tether_cli("--registry", FLOWS, "task", "run", "f.arm", "--params", '{"key": "k"}',
                                    "--json", home=home, TETHER_NODE="lab-1")  # fmt: skip
        assert code == 0 and json.loads(out)["status"] == "completed", err
        code, out, _ = tether_cli("cluster", "forget", "lab-1", "--json", home=home)
        assert code == 2 and "live worker" in out  # a live one is not forgotten
    finally:
        worker.terminate()
        worker.communicate(timeout=60)  # its pipe read to the end and closed
    code, out, _ = tether_cli("workers", "--all", "--json", home=home)
    assert [r["status"] for r in json.loads(out)] == ["stopped"]
    code, out, _ = tether_cli("cluster", "forget", "lab-1", "--json", home=home)
    assert code == 0 and json.loads(out)["forgotten"] == 1


def test_two_homes_on_one_sqlite_file_do_not_pretend_to_share_work(tmp_path: Path, home: Path) -> None:
    shared = f'[store]\ndatabase_url = "sqlite:///{tmp_path / "shared.db"}"\n'
    other = tmp_path / "other"
    other.mkdir()
    for h in (home, other):
        (h / "settings.toml").write_text(shared + f'[cluster]\nnode = "{h.name}"\n')
    assert tether_cli("cluster", "join", installation_id(home), home=other)[0] == 0
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "--registry", FLOWS, "worker", "--resources", "arm"],
        env={**os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": "0"}, cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:

        def refused() -> dict[str, object] | None:
            _, out, _ = tether_cli(
                "--registry", FLOWS, "task", "run", "f.arm", "--params", '{"key": "k"}', "--json", home=other
            )
            found = json.loads(out)
            return found if "share work only on PostgreSQL" in str(found.get("message")) else None

        found = wait_for(refused, timeout=60, what="the call refused, naming PostgreSQL")
        assert found["status"] == "rejected"
    finally:
        worker.terminate()
        worker.wait(timeout=60)
