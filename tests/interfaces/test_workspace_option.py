"""`tether run --workspace DIR` works on the files of that folder (`-w .`: the one the person is in), and
a setting given as `TETHER_<NAME>` reaches the workers as it reaches the command that starts them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import tether_cli

TETHER = str(Path(sys.executable).parent / "tether")


@pytest.mark.parametrize("served", ["0", "1"], ids=["own process", "cli server"])
def test_run_with_workspace_dot_reads_the_folder_the_person_is_in(
    home: Path, tmp_path: Path, served: str
) -> None:
    here = tmp_path / "mine"
    (here / "notes").mkdir(parents=True)
    (here / "notes" / "plan.md").write_text("# Plan\n\nShip on Friday.\n", encoding="utf-8")
    env = {**os.environ, "TETHER_HOME": str(home), "TETHER_CLI_SERVER": served}
    run = subprocess.run(
        [TETHER, "run", "--json", "-w", ".", "summarize notes/plan.md"],
        cwd=here, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    steps = json.loads(run.stdout)["steps"]
    read = [s for s in steps if s["tool"] == "workspace.read"]
    assert read and read[0]["result"]["status"] == "completed"
    assert "Ship on Friday" in json.dumps(read[0]["result"], ensure_ascii=False)
    assert not (home / "workspace" / "notes").exists()  # the home's own workspace was not used


def test_a_workspace_that_cannot_be_one_is_refused_before_anything_runs(home: Path, tmp_path: Path) -> None:
    code, out, err = tether_cli("run", "-w", str(tmp_path / "missing"), "list my files", home=home)
    assert code == 2 and "is not an existing folder" in err and "Traceback" not in err, (out, err)
    code, out, err = tether_cli("run", "-w", str(home), "list my files", home=home)
    assert code == 2 and "tether home" in err, (out, err)
    code, out, err = tether_cli("threads", "--json", home=home)
    assert code == 0 and json.loads(out) == []  # no turn was started


def test_a_setting_from_the_environment_reaches_the_worker(home: Path) -> None:
    workspace = home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    for n in range(3):
        (workspace / f"f{n}.txt").write_text("x", encoding="utf-8")
    code, out, err = tether_cli("task", "run", "workspace.list", "--json", home=home, TETHER_MAX_RESULTS="1")
    assert code == 0, err
    result = json.loads(out)
    assert len(result["data"]["entries"]) == 1 and "2 not shown" in result["message"]
