"""The README's "Register your own tasks" runs exactly as written: its files, its script, its commands."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTION = README[README.index("## Register your own tasks") : README.index("### The spec's policy fields")]
TETHER = str(Path(sys.executable).parent / "tether")


def files() -> dict[str, str]:
    """Every ```python block that starts with ``# path``: the file it shows."""
    return {m.group(2): m.group(1) for m in re.finditer(r"```python\n(# (\S+)\n.*?)```", SECTION, re.S)}


def commands() -> list[list[str]]:
    block = re.search(r"```sh\n(.*?)```", SECTION, re.S)
    assert block is not None
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [shlex.split(line) for line in lines if line]


@pytest.mark.parametrize("served", [False, True], ids=["own process", "cli server"])
def test_register_your_own_tasks_runs_as_written(tmp_path: Path, served: bool) -> None:
    shown = files()
    assert {"myapp/tasks.py", "myapp/checks.py", "myapp/handlers.py", "run.py"} <= set(shown)
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")  # "with an empty myapp/__init__.py"
    for name, text in shown.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = {
        **os.environ,
        "TETHER_HOME": str(tmp_path / "home"),
        "TETHER_CLI_SERVER": "1" if served else "0",
        "PYTHONPATH": str(ROOT),  # tether itself (installed in CI); never the app's folder
    }
    script = subprocess.run(
        [sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert script.returncode == 0, script.stderr
    assert script.stdout.strip() == "completed clean {'room': 'kitchen'}"  # what the README says
    for argv in commands():
        assert argv[0] == "tether"
        run = subprocess.run(
            [TETHER, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, f"{argv}: {run.stdout}{run.stderr}"
        assert "completed" in run.stdout and "Traceback" not in run.stderr, run.stdout + run.stderr
    if served:
        subprocess.run([TETHER, "server", "stop"], cwd=tmp_path, env=env, capture_output=True, timeout=30)
