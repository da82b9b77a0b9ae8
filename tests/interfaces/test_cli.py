import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import ROOT, tether_cli
from tether.interfaces.task_cli import parse_params

GOLD = ["-p", "instance_type=拟造花萼（金）", "-p", "instance_name=藏珍之蕾"]


def test_tasks_as_each_caller_sees_them(home: Path) -> None:
    code, out, _ = tether_cli("tasks", "--caller", "agent", "--json", home=home)
    agent = {row["task_id"] for row in json.loads(out)}
    code2, out2, _ = tether_cli("tasks", "--json", home=home)
    cli = {row["task_id"] for row in json.loads(out2)}
    assert code == code2 == 0
    assert "demo.debug_crash" not in agent and "demo.debug_crash" in cli
    farm = next(row for row in json.loads(out) if row["task_id"] == "demo.farm_instance")
    assert farm["params"]["properties"]["attempts"]["maximum"] == 99


def test_task_run_exit_codes_and_json(home: Path) -> None:
    code, out, _ = tether_cli("task", "run", "demo.nope", "--json", home=home)
    assert code == 2 and json.loads(out)["status"] == "not_found"

    code, out, _ = tether_cli("task", "run", "demo.start_game", "--json", home=home)
    assert code == 0 and json.loads(out)["status"] == "completed"

    code, out, _ = tether_cli(
        "task",
        "run",
        "demo.farm_instance",
        "-p",
        "instance_type=拟造花萼（金）",
        "-p",
        "instance_name=gold",
        "--json",
        home=home,
    )
    result = json.loads(out)
    assert code == 2 and result["status"] == "rejected"
    assert result["data"]["allowed"] == ["回忆之蕾", "以太之蕾", "藏珍之蕾"]

    code, out, _ = tether_cli(
        "task", "run", "demo.farm_instance", *GOLD, "-p", "attempts=2", "--json", home=home
    )
    assert code == 0 and json.loads(out)["data"]["attempts_done"] == 2

    code, out, _ = tether_cli("task", "run", "demo.salvage_relics", "-p", "rarity=3", "--json", home=home)
    assert code == 2 and json.loads(out)["data"]["needs_confirmation"] is True
    code, out, _ = tether_cli(
        "task", "run", "demo.salvage_relics", "-p", "rarity=3", "--confirm", "--json", home=home
    )
    assert code == 0 and json.loads(out)["data"]["salvaged"] == 5

    code, out, _ = tether_cli("task", "run", "demo.debug_crash", "--json", home=home)
    assert code == 1 and json.loads(out)["data"]["exit_code"] == 3
    tether_cli("task", "run", "demo.exit_game", home=home)


def test_job_commands_print_one_json_document(home: Path) -> None:
    tether_cli("task", "run", "demo.start_game", home=home)
    code, out, _ = tether_cli("task", "run", "demo.loop_farm", "--detach", "--json", home=home)
    execution_id = json.loads(out)["execution_id"]
    code, out, _ = tether_cli("job", "list", "--json", home=home)
    listed = json.loads(out)
    assert code == 0 and isinstance(listed, list) and listed[0]["execution_id"] == execution_id
    code, out, _ = tether_cli("job", "status", execution_id, "--json", home=home)
    status = json.loads(out)
    assert status["status"] == "running" and status["data"]["pid"] > 0 and "created_at" in status["data"]
    code, out, _ = tether_cli("job", "stop", execution_id, "--json", home=home)
    assert json.loads(out)["status"] == "stopped"
    code, out, _ = tether_cli("job", "status", "missing", "--json", home=home)
    assert code == 2 and json.loads(out)["status"] == "not_found"
    tether_cli("task", "run", "demo.exit_game", home=home)


def test_bad_params_are_explained_not_a_traceback(home: Path) -> None:
    code, out, err = tether_cli("task", "run", "demo.status", "--params", "{nope", "--json", home=home)
    assert code == 2 and "not valid JSON" in json.loads(out)["error"]["message"]
    code, out, err = tether_cli("task", "run", "demo.status", "-p", "novalue", home=home)
    assert code == 2 and "key=value" in err and "Traceback" not in err


def test_parse_params_reads_json_values() -> None:
    assert parse_params(["a=3", "b=x", "c=true", "d=null", "e=金币"], '{"z": 1}') == {
        "z": 1,
        "a": 3,
        "b": "x",
        "c": True,
        "d": None,
        "e": "金币",
    }


def test_progress_bar_on_a_terminal(home: Path) -> None:
    tether_cli("task", "run", "demo.start_game", home=home)
    leader, follower = pty.openpty()
    env = {**os.environ, "TETHER_HOME": str(home), "TETHER_DEMO_STEP_S": "0.3", "COLUMNS": "100"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.interfaces.cli",
            "task",
            "run",
            "demo.farm_instance",
            *GOLD,
            "-p",
            "attempts=3",
        ],
        stdout=follower,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert "attempt 2/3" in screen and "completed" in screen
    tether_cli("task", "run", "demo.exit_game", home=home)


def test_the_person_sees_and_stops_every_job_even_ones_a_model_started(home: Path) -> None:
    """Review: a job of a task exposed only to the agent could not be listed or stopped from the CLI."""
    from tests.support.helpers import FAST
    from tests.support.registry import registry
    from tether.execution.executor import Executor

    with Executor(registry, home=home, settings=FAST) as executor:
        job = executor.execute_sync("t.agent_loops", caller="agent", detach=True)
    support = ("--registry", "tests.support.registry:registry")
    code, out, _ = tether_cli(*support, "job", "list", "--active", "--json", home=home)
    assert [r["execution_id"] for r in json.loads(out)] == [job.execution_id]
    code, out, _ = tether_cli(*support, "job", "stop", job.execution_id, "--json", home=home)
    assert code == 0 and json.loads(out)["status"] == "stopped"
    code, out, _ = tether_cli(*support, "tasks", "--caller", "", "--json", home=home)
    assert code == 2 and "caller" in json.loads(out)["error"]["message"]


def test_help_loads_no_model_store_or_event_loop() -> None:
    """`tether --help` in its own process imports what drawing the help needs, nothing a command's body
    needs (pydantic, asyncio, the store, DBOS, HTTP clients, the web framework)."""
    script = (
        "import sys\n"
        "from tether.interfaces import cli\n"
        "try:\n"
        "    cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('pydantic', 'asyncio', 'sqlalchemy', 'dbos', 'httpx', 'openai', 'fastapi')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, env={**os.environ, "TETHER_CLI_SERVER": "0"}, timeout=60,
    )  # fmt: skip
    assert "Usage" in done.stdout and done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_a_job_that_logged_nothing_says_so(home: Path) -> None:
    """A finished task's empty log is removed with its worker (issue 20): ``job log`` says the job
    logged nothing instead of printing an empty line; ``--json`` still gives the text, empty."""
    support = ("--registry", "tests.support.registry:registry")
    code, out, err = tether_cli(*support, "task", "run", "t.quick", "--json", home=home)
    assert code == 0, err
    execution_id = json.loads(out)["execution_id"]
    code, out, _ = tether_cli(*support, "job", "log", execution_id, home=home)
    assert code == 0 and f"job {execution_id} logged nothing" in out
    code, out, _ = tether_cli(*support, "job", "log", execution_id, "--json", home=home)
    assert code == 0 and json.loads(out) == {"execution_id": execution_id, "text": ""}
