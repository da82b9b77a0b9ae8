"""``tether mcp``: registered with the other commands, and the SDK (about 1.5 s to import) stays off
every other command's start path; what a listed tool claims about itself."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from tests.interfaces.mcp.peers import DEMO, in_memory, text
from tests.support.helpers import FAST, ROOT, tether_cli
from tether.execution.executor import Executor
from tether.interfaces.mcp_server import Bridge, describe, progress_point, said_of, tool_annotations
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import Danger, TaskSpec
from tether.toolkits.demo.registry import registry as demo
from tether.toolkits.standard import registry as standard


def test_the_mcp_sdk_is_imported_by_no_other_command() -> None:
    code = (
        "import sys; from tether.interfaces import cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_tether_mcp_serve_is_a_command(home: Path) -> None:
    code, out, err = tether_cli("mcp", "serve", "--help", home=home)
    assert code == 0, err
    assert "--http" in out and "--port" in out


class Overwrites(BaseModel):
    overwrite: bool = False


def spec(task_id: str, **more: object) -> TaskSpec:
    return TaskSpec(task_id=task_id, handler="myapp.tasks:run", **more)  # type: ignore[arg-type]


def test_a_tool_claims_only_what_its_spec_says() -> None:
    web = tool_annotations(spec("web.fetch", idempotent=True))
    assert (web.read_only_hint, web.destructive_hint, web.idempotent_hint, web.open_world_hint) == (
        False,
        False,
        True,
        True,
    )
    careful = tool_annotations(spec("myapp.deploy", danger=Danger.CAUTION))
    assert careful.destructive_hint is None and careful.open_world_hint is None  # not knowable: unset
    assert careful.idempotent_hint is False
    sometimes = spec("workspace.save", params=Overwrites, destructive_if=("overwrite",))
    assert tool_annotations(sometimes).destructive_hint is True
    assert tool_annotations(sometimes).open_world_hint is False
    assert "A call with overwrite true is destructive" in describe(sometimes)
    assert "Unavailable in this home: no key" in describe(spec("web.fetch"), "no key")


def test_the_refusal_gives_a_command_that_runs_the_call_in_the_servers_home(
    home: Path, tmp_path: Path
) -> None:
    """A client that cannot ask is given the command the README shows, and that command does it, as
    pasted into a shell whose TETHER_HOME is another home: a client starts `tether --home H mcp serve`,
    and a command without that home ran the call, if at all, in the wrong home (audit)."""

    async def session() -> str:
        with Executor(standard, home=home, settings=FAST) as executor:
            async with in_memory(executor, "auto", None) as client:
                await client.call_tool("demo.start_game", {})
                return text(await client.call_tool("demo.salvage_relics", {"rarity": 3}))

    said = asyncio.run(session())
    command = said[said.index("tether --home") :]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    mcp = readme[readme.index("## MCP") : readme.index("## Documents, research")]
    assert f"`{command.replace(shlex.quote(str(home)), '~/.tether')}`" in mcp
    elsewhere = tmp_path / "another-home"
    code, out, err = tether_cli(*shlex.split(command)[1:], home=elsewhere)
    assert code == 0, out + err
    assert "salvaged" in out
    assert not (elsewhere / "tether.db").exists()


def test_the_refusal_names_the_servers_registry_unless_it_is_the_default(home: Path) -> None:
    with Executor(demo, home=home, settings=FAST) as executor:
        command = Bridge(executor).confirm_command("demo.salvage_relics", {"rarity": 3, "note": "a b'"})
    words = shlex.split(command)
    assert words[:5] == ["tether", "--home", str(home), "--registry", demo.ref]
    assert words[5:9] == ["task", "run", "demo.salvage_relics", "--params"]
    assert json.loads(words[9]) == {"rarity": 3, "note": "a b'"} and words[10] == "--confirm"


def test_a_progress_report_becomes_a_percent_or_one_step_on() -> None:
    assert progress_point({"fraction": 0.5, "message": "half"}, -1.0) == (50.0, 100.0, "half")
    assert progress_point({"fraction": None, "message": "working"}, 3.0) == (4.0, None, "working")
    assert progress_point({"fraction": 7, "message": ""}, 4.0) == (5.0, None, None)  # not a fraction


def test_serving_as_an_agent_that_does_not_exist_names_the_agents(home: Path) -> None:
    code, out, err = tether_cli("--registry", DEMO, "mcp", "serve", "--agent", "nosuch", home=home)
    assert code == 2 and "no agent 'nosuch'; agents: assistant" in out + err, (out, err)


def test_a_results_text_says_its_status_once() -> None:
    def said(status: TaskStatus, message: str) -> str:
        return said_of(
            TaskResult(task_id="demo.loop_farm", execution_id="e1", status=status, message=message)
        )

    assert said(TaskStatus.RUNNING, "running") == "demo.loop_farm running"
    assert said(TaskStatus.STOPPED, "stopped (asked by mcp)") == "demo.loop_farm stopped (asked by mcp)"
    assert said(TaskStatus.COMPLETED, "farmed 3 times") == "demo.loop_farm completed: farmed 3 times"
    assert said(TaskStatus.FAILED, "") == "demo.loop_farm failed"
