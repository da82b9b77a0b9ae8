"""A full disk: every command says the disk is full, and the commands that only read still work.

A full disk read "disk I/O error" and even ``tether job list`` failed: SQLite in WAL mode cannot make
room for the shared-memory file a reader needs. The home is put on a small tmpfs in a mount namespace
of its own (so nothing of it outlives the test), filled, and the CLI run against it as a person would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.figures import count
from tests.support.helpers import ROOT

SCENE = textwrap.dedent(
    """
    import json, os, subprocess, sys
    where, out = sys.argv[1], sys.argv[2]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", where], check=True)
    home = os.path.join(where, "home")
    env = {**os.environ, "TETHER_HOME": home, "TETHER_CLI_SERVER": "0"}
    def tether(*args):
        done = subprocess.run([sys.executable, "-m", "tether.interfaces.cli", *args, "--json"],
                              capture_output=True, text=True, env=env, timeout=120)
        return {"args": list(args), "code": done.returncode, "out": done.stdout, "err": done.stderr}
    before = [tether("task", "run", "demo.status"), tether("task", "run", "demo.start_game"),
              tether("run", "进度怎么样？")]
    with open(os.path.join(where, "filler"), "wb") as filler:  # fill the disk to the last block
        try:
            while True:
                filler.write(b"\\0" * 65536)
                filler.flush()
        except OSError:
            pass
    reads = [tether("job", "list"), tether("threads"), tether("tasks"), tether("doctor")]
    writes = [tether("task", "run", "demo.status"), tether("run", "启动游戏")]
    subprocess.run(["pkill", "-KILL", "-f", "demo.game " + home], capture_output=True)
    with open(out, "w") as f:
        json.dump({"before": before, "reads": reads, "writes": writes}, f)
    """
)


def _can_mount() -> bool:
    return (
        shutil.which("unshare") is not None
        and subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
    )


@pytest.mark.skipif(not _can_mount(), reason="needs unshare -m and mount (root): a tmpfs to fill")
def test_a_full_disk_is_said_and_reading_commands_still_work(tmp_path: Path) -> None:
    where, out = tmp_path / "disk", tmp_path / "out.json"
    where.mkdir()
    done = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", SCENE, str(where), str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    scene = json.loads(out.read_text())
    for run in scene["before"]:
        assert run["code"] in (0, 1), run  # the home worked before the disk filled
    for run in scene["reads"]:
        count("hostile inputs tried")
        assert run["code"] in (0, 1), run  # doctor exits 1 for the failed check, never an error
        assert "Traceback" not in run["err"] and "disk I/O error" not in run["out"] + run["err"], run
        json.loads(run["out"])
    jobs = json.loads(scene["reads"][0]["out"])
    assert {j["task_id"] for j in jobs} >= {"demo.status", "demo.start_game"}
    assert json.loads(scene["reads"][1]["out"])  # the thread is listed
    store = next(c for c in json.loads(scene["reads"][3]["out"]) if c["check"] == "store")
    assert store["status"] == "fail" and "full" in store["detail"], store
    for run in scene["writes"]:
        said = run["out"] + run["err"]
        assert "full" in said and "disk I/O error" not in said and "Traceback" not in said, run
