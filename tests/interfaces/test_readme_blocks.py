"""Every code block of the README runs in the test suite: shell blocks line by line in a fresh home, Python
blocks as files, settings blocks through the settings loader. A block no test runs fails the first test
here, so a new example cannot go in unchecked (tests/interfaces/test_readme.py runs the longer blocks)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.interfaces import test_readme
from tests.support.helpers import ROOT
from tests.support.research_site import research_site

README = (ROOT / "README.md").read_text(encoding="utf-8")
TETHER = str(Path(sys.executable).parent / "tether")


@dataclass(frozen=True)
class Block:
    line: int
    lang: str
    body: str
    heading: str

    @property
    def first(self) -> str:
        return self.body.splitlines()[0] if self.body else ""


def blocks() -> list[Block]:
    found = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", README, re.S | re.M):
        before = README[: match.start()]
        headings = re.findall(r"^#{2,3} (.+)$", before, re.M)
        found.append(
            Block(before.count("\n") + 1, match.group(1), match.group(2), headings[-1] if headings else "")
        )
    return found


# Which test runs each block: (the section's heading starts with, the block's first line starts with).
RUN_BY: dict[tuple[str, str], str] = {
    ("", "make demo"): "test_make_demo_runs_the_demo_and_make_test_is_this_suite",
    ("A 30-second tour", ". .venv/bin/activate"): "test_readme.test_the_tour_runs_as_the_readme_says",
    ("A 30-second tour", "tether demo --core"): "test_the_execution_core_block_runs_as_written",
    (
        "Register your own tasks",
        "# myapp/tools.py",
    ): "test_readme.test_register_your_own_tasks_runs_as_written",
    ("Register your own tasks", "# run.py"): "test_readme.test_register_your_own_tasks_runs_as_written",
    (
        "Register your own tasks",
        "tether --registry",
    ): "test_readme.test_register_your_own_tasks_runs_as_written",
    ("Larger packages", "# myapp/"): "test_readme.test_register_your_own_tasks_runs_as_written",
    ("Larger packages", "tether --registry"): "test_readme.test_register_your_own_tasks_runs_as_written",
    ("Using a real model", "[model]"): "test_every_settings_block_is_valid_settings",
    ("Using a real model", "tether auth set"): "test_the_key_block_stores_shows_and_checks_a_key",
    ("Testing your own agent code", "from tether import"): "test_the_python_examples_run_as_files",
    (
        "A team of agents",
        "tether agents bundles",
    ): "test_readme.test_the_team_block_runs_as_written_in_a_fresh_home",
    (
        "Memory",
        "tether run --new-thread farm",
    ): "test_readme.test_the_memory_block_runs_as_written_in_a_fresh_home",
    ("Initiative", "tether signal"): "test_readme.test_the_initiative_block_runs_as_written_in_a_fresh_home",
    ("Goals and flows", 'tether goal "'): "test_the_goal_block_runs_as_printed",
    ("Goals and flows", "# nightly.yaml"): "test_readme.test_the_flow_file_in_the_readme_runs_as_written",
    ("The web page", "tether serve"): "test_serve_and_the_event_stream_with_curl_work_as_printed",
    ("The web page", "curl -N"): "test_serve_and_the_event_stream_with_curl_work_as_printed",
    ("Documents, research", "tether demo --files"): "test_the_documents_block_works_on_a_fresh_machine",
    (
        "Documents, research",
        "tether run --format",
    ): "test_the_research_lines_work_with_search_and_say_why_not_without",
    ("Documents, research", "# <home>/settings.toml"): "test_every_settings_block_is_valid_settings",
    ("Storage, events", "# <home>/settings.toml"): "test_every_settings_block_is_valid_settings",
    ("Storage, events", "import asyncio"): "test_the_python_examples_run_as_files",
    ("Cost and traces", "# <home>/settings.toml"): "test_every_settings_block_is_valid_settings",
    (
        "Tools from other MCP servers",
        "# <home>/settings.toml",
    ): "test_the_mcp_servers_block_is_read_as_printed",
}


def runner_of(block: Block) -> str | None:
    found = [name for (heading, first), name in RUN_BY.items()
             if block.heading.startswith(heading) and block.first.startswith(first)]  # fmt: skip
    return found[0] if len(found) == 1 else None


def test_every_block_in_the_readme_is_run_by_a_test() -> None:
    here = sys.modules[__name__]
    unrun = [f"line {b.line} ({b.heading}): {b.first}" for b in blocks() if runner_of(b) is None]
    assert not unrun, "README blocks no test runs (add one and name it in RUN_BY):\n" + "\n".join(unrun)
    for name in set(RUN_BY.values()):
        module, _, function = name.rpartition(".")
        assert callable(getattr(test_readme if module else here, function, None)), name
    used = {runner_of(b) for b in blocks()}
    assert set(RUN_BY.values()) <= used, (
        f"RUN_BY names blocks the README no longer has: {set(RUN_BY.values()) - used}"
    )


def the_block(heading: str, first: str) -> Block:
    (block,) = [b for b in blocks() if b.heading.startswith(heading) and b.first.startswith(first)]
    return block


def shell_lines(block: Block) -> list[tuple[str, str]]:
    """(command, comment) for each command line; a ``\\``-continued line is joined; an output line under a
    command (``#   rejected: …``) joins its comment as ``prints: …``."""
    lines, pending = [], ""
    for raw in block.body.splitlines():
        if raw.startswith("#") and lines:  # what the line above prints
            lines[-1] = (lines[-1][0], f"{lines[-1][1]} prints: {raw.lstrip('# ')}".strip())
            continue
        if not raw.strip():
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        command, _, comment = (pending + raw).partition("  #")
        pending = ""
        lines.append((command.strip(), comment.strip()))
    return lines


class Shell:
    """Runs README lines as a person would: in ``cwd``, with HOME and TETHER_HOME fresh (``~/.tether`` is the
    home), placeholders like ``<thread_id>`` filled from what earlier lines printed. Each ``tether`` goes
    through the test process's CLI server, as a person's commands after the first one do."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.cwd = tmp_path / "work"
        self.cwd.mkdir()
        self.home = tmp_path / "person" / ".tether"
        self.env = {**os.environ, "HOME": str(tmp_path / "person"), "TETHER_HOME": str(self.home),
                    "TETHER_DEMO_STEP_S": "0.02", **env}  # fmt: skip
        self.env["PATH"] = f"{Path(TETHER).parent}:{self.env['PATH']}"
        self.values: dict[str, str] = {}

    def run(
        self, command: str, *, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        for name, value in self.values.items():
            command = command.replace(f"<{name}>", value)
        done = subprocess.run(
            ["bash", "-c", command], cwd=self.cwd, env=self.env, input=stdin, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        assert "Traceback" not in done.stderr, (command, done.stderr[-2000:])
        return done

    def tether_json(self, *args: str) -> object:
        done = self.run(shlex.join([TETHER, *args, "--json"]))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def expected_exit(comment: str) -> int:
    for words, code in (("exits 3", 3), ("rejected", 2), ("exit 1", 1)):
        if words in comment:
            return code
    return 0


# -- the blocks -------------------------------------------------------------------------------------


def test_make_demo_runs_the_demo_and_make_test_is_this_suite(tmp_path: Path) -> None:
    block = the_block("", "make demo")
    assert [line for line, _ in shell_lines(block)] == ["make demo", "make test"]
    env = {
        **os.environ,
        "TETHER_HOME": str(tmp_path / "home"),
        "TETHER_CLI_SERVER": "0",
        "TETHER_DEMO_STEP_S": "0.02",
    }
    demo = subprocess.run(["make", "demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0 and "Tour done" in demo.stdout, demo.stdout[-1500:] + demo.stderr[-1500:]
    dry = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "-m pytest" in dry.stdout  # `make test` is what runs this suite (.ci/run calls it)


def test_the_execution_core_block_runs_as_written(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    try:
        for command, comment in shell_lines(the_block("A 30-second tour", "tether demo --core")):
            if "<execution_id>" in command:
                jobs = shell.tether_json("job", "list", "--active")
                assert isinstance(jobs, list) and jobs, "the --detach line left a job running"
                shell.values["execution_id"] = str(jobs[0]["execution_id"])
            done = shell.run(command)
            assert done.returncode == expected_exit(comment), (
                command,
                done.stdout[-800:],
                done.stderr[-800:],
            )
            if "prints: " in comment:  # exactly what the README shows under the line
                shown = comment.split("prints: ", 1)[1].removeprefix("rejected: ")
                assert shown in " ".join(done.stdout.split()), done.stdout
    finally:
        shell.run(f"{TETHER} task run demo.exit_game")


def test_every_settings_block_is_valid_settings(tmp_path: Path) -> None:
    from tether.config import SECTIONS, load_section

    checked = 0
    for block in blocks():
        if block.lang != "toml":
            continue
        home = tmp_path / f"home-{block.line}"
        home.mkdir()
        tomllib.loads(block.body)  # valid TOML as printed
        (home / "settings.toml").write_text(block.body, encoding="utf-8")
        for name in tomllib.loads(block.body):
            load_section(SECTIONS[name], home, environ={})
        checked += 1
    assert checked >= 3


def test_the_mcp_servers_block_is_read_as_printed(tmp_path: Path) -> None:
    """The block as a home's settings: every entry passes the toolkit's own checks, and `tether mcp
    tools` reads it (starting nothing: no tool list was kept yet) and names each server's secret."""
    from tests.support.helpers import tether_cli
    from tether.config import McpSettings, load_section
    from tether.toolkits.mcp.servers import load_servers

    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.toml").write_text(the_block("Tools from other MCP servers", "#").body, encoding="utf-8")
    load_section(McpSettings, home, environ={})
    servers = load_servers(home, environ={})
    assert sorted(servers) == ["files", "tracker"] and servers["tracker"].transport == "http"
    code, out, err = tether_cli("mcp", "tools", "--json", home=home)
    assert code == 0, err
    listed = {server["server"]: server for server in json.loads(out)["servers"]}
    assert all("never listed" in server["problem"] for server in listed.values())
    assert listed["tracker"]["secrets"] == {
        "Authorization": {"keyring": "mcp.tracker.authorization", "stored": False}
    }


def test_the_key_block_stores_shows_and_checks_a_key(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    shell.home.mkdir(parents=True)
    (shell.home / "settings.toml").write_text(
        the_block("Using a real model", "[model]").body, encoding="utf-8"
    )
    key = "sk-readme-test-0123456789"
    outputs = []
    for command, _ in shell_lines(the_block("Using a real model", "tether auth set")):
        done = shell.run(command, stdin=key + "\n" if " set " in command else None)
        outputs.append(done.stdout + done.stderr)
        if "doctor" not in command:
            assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert key not in "".join(outputs)  # never echoed, never shown
    assert str(len(key)) in outputs[1]  # `auth show`: where it comes from and its length
    assert "keyring" in outputs[2] and "model" in outputs[2]  # doctor checked the key and the model


def test_the_python_examples_run_as_files(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    scripted = the_block("Testing your own agent code", "from tether import")
    (shell.cwd / "scripted.py").write_text(scripted.body, encoding="utf-8")
    first = shell.run(f"{sys.executable} scripted.py")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == scripted.body.split("# ", 2)[-1].strip().splitlines()[-1].split("# ")[-1]
    stream = the_block("Storage, events", "import asyncio")
    (shell.cwd / "follow.py").write_text(stream.body, encoding="utf-8")
    follow = shell.run(f"{sys.executable} follow.py", timeout=60)
    assert follow.returncode == 0, follow.stderr
    kinds = [line.split()[1] for line in follow.stdout.splitlines()]
    assert kinds[:3] == ["turn_started", "model_decided", "tool_started"] and kinds[-1] == "turn_finished"
    shell.run(f"{TETHER} task run demo.exit_game")


def test_the_goal_block_runs_as_printed(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    block = the_block("Goals and flows", 'tether goal "')
    printed = [line[2:] for line in block.body.splitlines() if line.startswith("# ")]
    lines = shell_lines(block)
    goal = shell.run(lines[0][0])
    assert goal.returncode == 3, goal.stdout + goal.stderr  # it waits for the person at exit_game-4
    said = " ".join((goal.stdout + goal.stderr).split())
    run_id = re.search(r"run-[0-9a-f]{6,}", said)

    def shown(text: str) -> str:  # durations and the run's id differ from run to run
        return " ".join(re.sub(r"run-[0-9a-f]{6,}", "run-ID", re.sub(r"\d+\.\d+ s", "", text)).split())

    for expected in printed:
        assert " ".join(shown(expected).split()[:6]) in shown(said), (expected, said[-2000:])
    assert run_id is not None
    for command, _ in lines[1:]:
        done = shell.run(command.replace("run-27f8", run_id.group(0)[:8]))
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    status = shell.tether_json("flow", "show", run_id.group(0))
    assert isinstance(status, dict) and status["status"] == "completed", status


def test_serve_and_the_event_stream_with_curl_work_as_printed(tmp_path: Path) -> None:
    shell = Shell(tmp_path, BROWSER="true")  # `--open` opens the page with a browser that does nothing
    shell.run(f"{TETHER} run --new-thread t1 'start the game'")
    serve_lines = shell_lines(the_block("The web page", "tether serve"))
    assert [c for c, _ in serve_lines] == ["tether serve", "tether serve --open"]
    for command, _ in serve_lines:
        server = subprocess.Popen(
            ["bash", "-c", f"exec {command}"], cwd=shell.cwd, env=shell.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            first = server.stdout.readline()
            while "http://127.0.0.1:8765/?token=" not in first:
                assert first, "serve ended before it printed its address"
                first = server.stdout.readline()
            if command == "tether serve":
                ((curl_command, _),) = shell_lines(the_block("The web page", "curl -N"))
                streamed = _stream(curl_command, shell)
                assert "turn_started" in streamed and "tool_finished" in streamed, streamed[-800:]
        finally:
            os.killpg(server.pid, signal.SIGINT)  # Ctrl-C stops it
            code = server.wait(timeout=60)
            if server.stdout is not None:
                server.stdout.close()
        assert code in (0, 130, -signal.SIGINT), code
    shell.run(f"{TETHER} task run demo.exit_game")


def _stream(command: str, shell: Shell) -> str:
    """What ``command`` (a stream that never ends by itself) printed until it showed a turn start and a
    tool finish, ended, or reached the deadline; it is stopped then."""
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {command}"], cwd=shell.cwd, env=shell.env, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    out = proc.stdout
    assert out is not None
    read: list[bytes] = []

    def keep() -> None:
        for line in out:
            read.append(line)

    reader = threading.Thread(target=keep, daemon=True)
    reader.start()

    def shown() -> bool:
        streamed = b"".join(read)
        return b"turn_started" in streamed and b"tool_finished" in streamed

    deadline = time.monotonic() + 60
    try:
        while not shown() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=10)
        out.close()
    return b"".join(read).decode(errors="replace")


def test_the_documents_block_works_on_a_fresh_machine(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    outputs = []
    for command, comment in shell_lines(the_block("Documents, research", "tether demo --files")):
        if "<id>" in command:
            listed = shell.tether_json("artifacts")
            assert isinstance(listed, dict) and listed["items"], listed
            shell.values["id"] = str(listed["items"][0]["artifact_id"])
        if "your own report.pdf" in comment:  # the person's own file, in the folder they are in
            (shell.cwd / "report.pdf").write_bytes((shell.home / "workspace" / "report.pdf").read_bytes())
        done = shell.run(command)
        assert done.returncode == 0, (command, done.stdout[-800:], done.stderr[-800:])
        outputs.append(" ".join(done.stdout.split()))
    assert "wrote report.pdf" in outputs[0] and "notes.pptx" not in outputs[0]
    assert ".pptx" in outputs[1] and "completed" in outputs[1]
    assert "six to nine years" in outputs[2] and "six to nine years" in outputs[3]
    copied = [p for p in shell.cwd.iterdir() if p.suffix in (".pptx", ".pdf") and p.name != "report.pdf"]
    assert copied, "artifacts get --out . copied nothing here"


def test_the_research_lines_work_with_search_and_say_why_not_without(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    lines = shell_lines(the_block("Documents, research", "tether run --format"))
    refused = shell.run(lines[0][0])
    assert refused.returncode == 1 and "search_provider" in refused.stdout, refused.stdout + refused.stderr
    assert "· failed ·" in refused.stdout.splitlines()[-1]  # its last line says so
    with research_site() as site:
        shell.home.mkdir(parents=True, exist_ok=True)
        site.configure(shell.home)
        for command, comment in lines:
            if "<thread_id>" in command:
                threads = shell.tether_json("threads")
                assert isinstance(threads, list)
                shell.values["thread_id"] = str(threads[0]["thread_id"])  # the newest: the one that asks
            done = shell.run(command)
            assert done.returncode == expected_exit(comment), (
                command,
                done.stdout[-1500:],
                done.stderr[-999:],
            )
    saved = shell.home / "workspace" / "handouts"
    assert any(saved.glob("solar.*")), "the handout was not saved to handouts/solar"
