"""The README runs exactly as written: "Register your own tasks" (its files, its script, its commands in both
forms), the tour, the flow file and the blocks of the team, memory and initiative sections."""

import json
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
ONE_FUNCTION, LARGER = SECTION.split("### Larger packages", 1)
TETHER = str(Path(sys.executable).parent / "tether")


def files() -> dict[str, str]:
    """Every ```python block that starts with ``# path``: the file it shows."""
    return {m.group(2): m.group(1) for m in re.finditer(r"```python\n(# (\S+)\n.*?)```", SECTION, re.S)}


def commands() -> list[list[str]]:
    """The shell lines of both forms: the one-function tool's, then the larger package's."""
    lines = []
    for part in (ONE_FUNCTION, LARGER):
        block = re.search(r"```sh\n(.*?)```", part, re.S)
        assert block is not None
        lines += [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [shlex.split(line) for line in lines if line]


@pytest.mark.parametrize("served", [False, True], ids=["own process", "cli server"])
def test_register_your_own_tasks_runs_as_written(tmp_path: Path, served: bool) -> None:
    shown = files()
    assert {"myapp/tools.py", "myapp/tasks.py", "myapp/checks.py", "myapp/handlers.py", "run.py"} <= set(
        shown
    )
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
    if served:  # the commands below run in the CLI server, and their workers are forked by it
        from tests.support.helpers import wait_for

        subprocess.run([TETHER, "--help"], cwd=tmp_path, env=env, capture_output=True, timeout=60)

        def serving() -> bool:
            status = subprocess.run(
                [TETHER, "server", "status", "--json"], cwd=tmp_path, env=env, capture_output=True, timeout=60
            )
            return status.returncode == 0 and json.loads(status.stdout)["pid"] is not None

        wait_for(serving, what="the CLI server")
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


def tour_lines() -> list[tuple[list[str], str]]:
    """The 30-second tour's commands, with the comment each carries."""
    start = README.index("## A 30-second tour")
    block = re.search(r"```sh\n(.*?)```", README[start:], re.S)
    assert block is not None
    lines = []
    for raw in block.group(1).splitlines():
        command, _, comment = raw.partition("  #")
        if command.strip().startswith("tether"):
            lines.append((shlex.split(command), comment.strip()))
    return lines


def test_the_tour_runs_as_the_readme_says(tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_HOME": str(tmp_path / "home"), "TETHER_DEMO_STEP_S": "0.05"}
    expected_exit = {"exits 3": 3}
    ran = 0
    for argv, comment in tour_lines():
        if argv[1] == "serve":
            continue  # long-lived: test_readme_blocks runs `tether serve --open` and stops it with Ctrl-C
        if "&&" in argv:  # `tether threads && tether trace <thread_id>`: the newest thread's id
            listed = subprocess.run([TETHER, "threads", "--json"], env=env, capture_output=True, text=True)
            newest = json.loads(listed.stdout)[0]["thread_id"]
            argv = [newest if a == "<thread_id>" else a for a in argv]
            line = shlex.join(argv).replace("'&&'", "&&")
            path = {**env, "PATH": f"{Path(TETHER).parent}:{env['PATH']}"}
            run = subprocess.run(["bash", "-c", line], env=path, capture_output=True, text=True, timeout=120)
            assert run.returncode == 0 and newest in run.stdout and "1:0" in run.stdout, (
                run.stdout + run.stderr
            )
            ran += 1
            continue
        stdin = "what can you do?\nexit\n" if argv[1] == "chat" else None  # a conversation, then leaving
        run = subprocess.run(
            [TETHER, *argv[1:]], env=env, capture_output=True, text=True, timeout=120, input=stdin
        )
        want = next((code for words, code in expected_exit.items() if words in comment), 0)
        assert run.returncode == want, f"{argv}: {run.stdout}{run.stderr}"
        assert "Traceback" not in run.stderr
        if "get_task_status" in comment:
            assert "get_task_status" in run.stderr and "demo.loop_farm" in run.stdout
        ran += 1
    assert ran >= 10
    jobs = subprocess.run(
        [TETHER, "job", "list", "--active", "--json"], env=env, capture_output=True, text=True
    )
    assert jobs.returncode == 0 and json.loads(jobs.stdout) == []  # "stop it" stopped the loop
    subprocess.run([TETHER, "task", "run", "demo.exit_game"], env=env, capture_output=True, timeout=60)


def test_the_flow_file_in_the_readme_runs_as_written(tmp_path: Path) -> None:
    """The README's nightly.yaml is valid and runs: to the review before `quit`, which the approval
    (while nothing runs) and a resume carry to the end."""
    section = README[README.index("## Goals and flows") : README.index("## Storage, events and the runtime")]
    block = re.search(r"```yaml\n# nightly\.yaml[^\n]*\n(.*?)```", section, re.S)
    assert block is not None
    (tmp_path / "nightly.yaml").write_text(block.group(1), encoding="utf-8")
    env = {**os.environ, "TETHER_HOME": str(tmp_path / "home"), "TETHER_DEMO_STEP_S": "0.01"}

    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TETHER, *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )

    assert tether("flow", "validate", "nightly.yaml").returncode == 0
    run = tether("flow", "run", "nightly.yaml", "--json")
    assert run.returncode == 3, run.stdout + run.stderr
    document = json.loads(run.stdout)
    assert [t["status"] for t in document["tasks"]] == [
        "completed",
        "completed",
        "completed",
        "waiting_for_human",
    ]
    run_id = document["run_id"]
    assert tether("flow", "approve", run_id[:9], "quit").returncode == 0
    done = tether("flow", "resume", run_id, "--json")
    assert done.returncode == 0 and json.loads(done.stdout.strip().splitlines()[-1])["status"] == "completed"


def test_the_team_block_runs_as_written_in_a_fresh_home(tmp_path: Path) -> None:
    """ "A team of agents": every command of its block, in a fresh home with the offline model."""
    start = README.index("## A team of agents")
    block = re.search(r"```bash\n(.*?)```", README[start:], re.S)
    assert block is not None
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "TETHER_HOME": str(home)}
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    for line in filter(None, lines):
        argv = shlex.split(line)
        assert argv[0] == "tether"
        done = subprocess.run([TETHER, *argv[1:]], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (line, done.stdout[-800:], done.stderr[-800:])
        assert "Traceback" not in done.stderr
    listed = subprocess.run(
        [TETHER, "threads", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    threads = json.loads(listed.stdout)
    assert {t["agent"] for t in threads} >= {"manager", "research", "docs"}  # the manager handed work on
    assert any(t["agent"] == "research" and t["parent"] for t in threads)
    made = subprocess.run(
        [TETHER, "artifacts", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    (deck,) = [i for i in json.loads(made.stdout)["items"] if i["format"] == "pptx"]
    assert deck["name"].startswith("Solar power"), deck  # the docs agent's deck of the research's summary


def run_block(heading: str, tmp_path: Path) -> list[str]:
    """Every command of the first ```bash block after ``heading``, in a fresh home (each must exit 0
    with no traceback): what each printed."""
    start = README.index(heading)
    block = re.search(r"```bash\n(.*?)```", README[start:], re.S)
    assert block is not None
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "TETHER_HOME": str(home)}
    outputs = []
    for line in filter(None, (line.split("  #")[0].strip() for line in block.group(1).splitlines())):
        argv = shlex.split(line)
        assert argv[0] == "tether"
        done = subprocess.run([TETHER, *argv[1:]], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (line, done.stdout[-800:], done.stderr[-800:])
        assert "Traceback" not in done.stderr
        outputs.append(done.stdout)
    return outputs


def test_the_memory_block_runs_as_written_in_a_fresh_home(tmp_path: Path) -> None:
    """ "Memory": every command of its block, in a fresh home with the offline model; the question about
    the earlier thread is answered from it."""
    outputs = run_block("## Memory: what the agents remember", tmp_path)
    assert "线程 farm" in outputs[1] and "藏珍之蕾" in outputs[1], outputs[1]
    assert "记下了：周报用 PDF 发给王芳" in outputs[3]
    assert "周报用 PDF 发给王芳" in outputs[4] and "周报用 PDF 发给王芳" in outputs[5]


def test_the_initiative_block_runs_as_written_in_a_fresh_home(tmp_path: Path) -> None:
    """ "Initiative": every command of its block, in a fresh home; what it says fires fires, what it
    says stays silent stays silent, and the rating and schedules do what the comments say."""
    outputs = [" ".join(out.split()) for out in run_block("## Initiative: agents that speak first", tmp_path)]
    assert "fired alert" in outputs[0] and "silent" in outputs[1] and "fired alert" in outputs[2]
    assert "threshold is now 0.55" in outputs[4]
    assert "daily" in outputs[7] and "plants" in outputs[7] and "浇花" in outputs[7]
    assert "removed plants" in outputs[8]
