"""``tether mcp tools`` and the imported tools through the real ``tether`` command: listed, run, and
in ``tether job list`` like any task; the SDK's absence said with the command that installs it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.helpers import ROOT, tether_cli
from tests.toolkits.mcp.conftest import keep_listing, ran, server_entry
from tether.agent.surface import tool_for
from tether.execution.executor import Executor
from tether.interfaces import doctor
from tether.tasks.result import TaskStatus
from tether.toolkits.mcp import cache, specs
from tether.toolkits.mcp.schema import SDK_MISSING


def test_tools_are_listed_then_run_with_task_run_and_appear_in_job_list(home: Path, notes_log: Path) -> None:
    (home / "settings.toml").write_text(server_entry("notes", notes_log), encoding="utf-8")
    code, out, err = tether_cli("mcp", "tools", home=home)
    assert code == 0, err
    assert "never listed: run `tether mcp tools notes --refresh`" in " ".join(out.split())

    code, out, err = tether_cli("mcp", "tools", "--refresh", "--json", home=home)
    assert code == 0, err
    [notes] = json.loads(out)["servers"]
    imported = {tool["task_id"]: tool["danger"] for tool in notes["tools"] if tool["imported"]}
    assert imported["mcp.notes.read_note"] == "caution" and imported["mcp.notes.delete_note"] == "destructive"
    skipped = {tool["name"]: tool["why"] for tool in notes["tools"] if not tool["imported"]}
    assert "also becomes mcp.notes.read_file" in skipped["read-file"]

    code, out, err = tether_cli("tasks", "--json", home=home)
    listed = {task["task_id"]: task for task in json.loads(out)}
    assert listed["mcp.notes.read_note"]["params"]["properties"]["mode"]["enum"] == ["short", "full"]

    code, out, err = tether_cli("task", "run", "mcp.notes.read_note", "-p", "name=草稿", "--json", home=home)
    assert code == 0, (out, err)
    result = json.loads(out)
    assert result["status"] == "completed" and result["message"] == "note 草稿 (short): buy milk"
    assert ran(notes_log)[-1]["arguments"] == {"name": "草稿", "mode": "short"}

    code, out, _ = tether_cli("job", "list", "--json", home=home)
    jobs = {job["execution_id"]: job for job in json.loads(out)}
    assert jobs[result["execution_id"]]["task_id"] == "mcp.notes.read_note"
    assert jobs[result["execution_id"]]["status"] == "completed"

    code, out, _ = tether_cli("task", "run", "mcp.notes.read_note", "-p", "mode=long", home=home)
    assert code == 2 and "allowed: short, full" in out  # refused, and the allowed values said


def test_a_refresh_that_failed_is_said_in_its_servers_json(home: Path, notes_log: Path) -> None:
    """Review: `tether mcp tools --refresh --json` said nothing of a refresh that failed (only the exit
    code did), so a script could not tell which server's list is still the old one, or why."""
    gone = '[[mcp.servers]]\nname = "gone"\ncommand = "/nonexistent/mcp-server"\ntools = ["*"]\n'
    (home / "settings.toml").write_text(server_entry("notes", notes_log) + gone, encoding="utf-8")
    code, out, err = tether_cli("mcp", "tools", "--json", home=home)
    assert code == 0, err
    assert [server["refresh"] for server in json.loads(out)["servers"]] == [None, None]  # none was asked

    code, out, err = tether_cli("mcp", "tools", "--refresh", "--json", home=home)
    assert code == 1, err
    servers = {server["server"]: server for server in json.loads(out)["servers"]}
    assert servers["notes"]["refresh"]["status"] == "completed"
    failed = servers["gone"]["refresh"]
    assert failed["status"] == "failed" and "cannot start the MCP server 'gone'" in failed["message"], failed
    code, job, _ = tether_cli("job", "status", failed["execution_id"], "--json", home=home)
    assert code == 0 and json.loads(job)["task_id"] == "mcp.refresh", job
    assert servers["gone"]["problem"].startswith("its tools were never listed")


def test_tool_names_outside_the_mcp_rule_are_left_out_and_printed_harmlessly(
    home: Path, notes_log: Path
) -> None:
    """Review: a name with control characters reached the terminal as they were (``--json`` keeps
    non-ASCII text as it is: the 8-bit CSI, a right-to-left override), and ``read note`` took
    ``read_note``'s task id from it."""
    odd = ["wipe\x9b2J\x1b[2J\x07", "evil\u202etxt.exe", "read note", "n" * 500]
    entry = server_entry("notes", notes_log, tools=["*"], env={"NOTES_ODD_NAMES": json.dumps(odd)})
    (home / "settings.toml").write_text(entry, encoding="utf-8")
    code, out, err = tether_cli("mcp", "tools", "--refresh", "--json", home=home)
    assert code == 0, err
    assert out.rstrip("\n").isprintable(), out
    [notes] = json.loads(out)["servers"]
    left_out = [tool for tool in notes["tools"] if "not a valid MCP tool name" in tool["why"]]
    shown = ["evil\\u202etxt.exe", "n" * 64 + "…", "read note", "wipe\\x9b2J\\x1b[2J\\x07"]
    assert sorted(tool["name"] for tool in left_out) == shown
    assert not any(tool["imported"] for tool in left_out)
    assert {"mcp.notes.read_note", "mcp.notes.whoami"} <= {
        t["task_id"] for t in notes["tools"] if t["imported"]
    }
    code, out, err = tether_cli("mcp", "tools", home=home)
    assert code == 0 and out.replace("\n", "").isprintable() and "wipe\\x9b2J" in out, (out, err)


def test_an_imported_tools_words_reach_the_terminal_and_the_model_without_control_characters(
    home: Path, notes_log: Path
) -> None:
    """Review: a tool's title and description (and its parameters') came from a server we do not
    trust as they were: an escape sequence or a right-to-left override reached `tether tasks` and the
    model. Its name is left out when it breaks the rule; its words are kept, made plain."""
    (home / "settings.toml").write_text(server_entry("notes", notes_log, tools=["*"]), encoding="utf-8")
    schema = {
        "type": "object",
        "properties": {"color": {"type": "string", "description": "the \x1b[5mcolor\u202e"}},
    }
    said = "Paints it \x1b[2J\x9b31mred\u202etxt.exe\r\nfor good"
    keep_listing(home, "notes", cache.tool_entry("paint", "Paint\x1b]0;owned\x07", said, schema, {}))
    [plan] = specs.plan(home)
    [tool] = plan.tools
    assert tool.spec is not None, tool.skipped
    words = "Paints it [2J31mredtxt.exe\nfor good"
    assert tool.description == words
    assert tool.spec.description == f"{words} (the tool 'paint' of the MCP server 'notes')"
    assert tool.spec.aliases == ("paint", "Paint]0;owned")
    seen = tool_for(tool.spec)  # what the model is told
    assert seen.description.startswith(words) and "Paint]0;owned" in seen.description
    assert seen.parameters["properties"]["color"]["description"] == "the [5mcolor"

    code, out, err = tether_cli("tasks", "--json", home=home)
    assert code == 0, err
    assert out.rstrip("\n").isprintable(), out
    [row] = [task for task in json.loads(out) if task["task_id"] == "mcp.notes.paint"]
    assert row["description"] == tool.spec.description and row["aliases"] == ["paint", "Paint]0;owned"]
    assert row["params"]["properties"]["color"]["description"] == "the [5mcolor"


def test_a_setting_that_is_wrong_is_named_by_every_command(home: Path) -> None:
    (home / "settings.toml").write_text(
        '[[mcp.servers]]\nname = "Bad Name"\nurl = "ftp://x"\n', encoding="utf-8"
    )
    code, out, err = tether_cli("tasks", home=home)
    assert code != 0
    said = " ".join((out + err).split())
    assert "[[mcp.servers]] #1 'Bad Name'" in said and "name:" in said


def test_without_the_sdk_imported_tools_are_refused_naming_the_install_command(
    notes: Executor, home: Path, monkeypatch: pytest.MonkeyPatch, make_executor: Callable[..., Executor]
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # what a home without tether[mcp] finds
    executor = make_executor(specs.registry)
    for task_id, params in (("mcp.notes.read_note", {"name": "a"}), ("mcp.refresh", {"server": "notes"})):
        result = executor.execute_sync(task_id, params, caller="cli")
        assert result.status is TaskStatus.REJECTED
        assert "pip install 'tether[mcp]'" in result.message
    assert specs.sdk_problem(home) is not None


def test_no_command_start_imports_the_sdk_or_starts_a_server(
    notes: Executor, home: Path, notes_log: Path
) -> None:
    before = len(ran(notes_log))
    code = (
        "import sys; from tether.execution.executor import Executor; "
        "from tether.toolkits.standard import registry; "
        f"e = Executor(registry, home={str(home)!r}); print(len(e.registry)); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types'))); e.close()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    count, modules = done.stdout.split("\n")[:2]
    assert int(count) > 25 and modules == "[]"  # the imported tasks are there, the SDK is not
    assert len(ran(notes_log)) == before


def test_doctor_says_what_an_mcp_server_still_needs(home: Path, notes_log: Path) -> None:
    (home / "settings.toml").write_text(
        server_entry("vault", notes_log, tools=["whoami"], secret_env=["NOTES_TOKEN"]), encoding="utf-8"
    )
    _, out, _ = tether_cli("doctor", "--json", home=home)
    mcp = {check["check"]: check for check in json.loads(out)}["mcp"]
    assert mcp["status"] == "warn", mcp
    assert "vault: its tools were never listed: run `tether mcp tools vault --refresh`" in mcp["fix"]


def test_doctor_names_every_servers_problem_not_only_the_first(
    home: Path, notes_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: the mcp check stopped at the first problem it found, so a server whose tools were
    never listed hid its own missing secret and another server's."""
    (home / "settings.toml").write_text(
        server_entry("fresh", notes_log, tools=["whoami"], secret_env=["FRESH_TOKEN"])
        + server_entry("vault", notes_log, tools=["whoami"], secret_env=["NOTES_TOKEN"]),
        encoding="utf-8",
    )
    keep_listing(home, "vault")
    check = doctor.check_mcp(home)
    assert check is not None
    assert check.status == doctor.WARN
    assert check.fix.split("; ") == [
        "fresh: its tools were never listed: run `tether mcp tools fresh --refresh`",
        "fresh: store its secret FRESH_TOKEN in the keyring: `tether auth set mcp.fresh.fresh_token`",
        "vault: store its secret NOTES_TOKEN in the keyring: `tether auth set mcp.vault.notes_token`",
    ]

    monkeypatch.setitem(sys.modules, "mcp", None)  # the worst status wins; nothing else is hidden
    worst = doctor.check_mcp(home)
    assert worst is not None
    assert worst.status == doctor.FAIL
    assert worst.fix.split("; ") == [SDK_MISSING, *check.fix.split("; ")]


def test_doctor_names_a_wrong_server_entry(home: Path) -> None:
    (home / "settings.toml").write_text('[[mcp.servers]]\nname = "x"\n', encoding="utf-8")
    _, out, _ = tether_cli("doctor", "--json", home=home)
    mcp = {check["check"]: check for check in json.loads(out)}["mcp"]
    assert mcp["status"] == "fail" and "give either command (a program to start) or url" in mcp["fix"]


def test_a_wrong_server_entry_leaves_the_jobs_reachable(home: Path) -> None:
    """Review: one bad [[mcp.servers]] entry stopped `tether job list` and `tether job stop` (the
    executor would not open): the control plane works whatever the entry says."""
    (home / "settings.toml").write_text('[[mcp.servers]]\nname = "x"\n', encoding="utf-8")
    code, out, err = tether_cli("job", "list", "--json", home=home)
    assert code == 0 and json.loads(out) == [], (out, err)
    code, out, err = tether_cli("job", "stop", "1a23b1d1da22368f5cf", "--json", home=home)
    assert json.loads(out)["status"] == "not_found" and "Traceback" not in err, (out, err)
    assert "left out: invalid setting" in err  # the person is told why imported tools are missing
