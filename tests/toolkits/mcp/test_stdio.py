"""Imported tools of a real MCP server started over stdio, through a real executor: the allowlist,
calls, refusals before anything runs, stops, crashes and the tool list kept in the home."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.helpers import exited, wait_for
from tests.toolkits.mcp.conftest import live_servers, ran, refresh, server_entry
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths
from tether.tasks.result import TaskStatus
from tether.tasks.spec import Danger
from tether.toolkits.mcp import specs
from tether.toolkits.mcp.specs import registry


def test_nothing_is_imported_until_the_tools_are_listed_and_nothing_starts_a_server(
    home: Path, notes_log: Path, make_executor: Callable[..., Executor]
) -> None:
    (home / "settings.toml").write_text(server_entry("notes", notes_log), encoding="utf-8")
    executor = make_executor(registry)
    assert [spec.task_id for spec in executor.registry] == ["mcp.refresh"]
    [plan] = specs.plan(home)
    assert "never listed" in plan.problem and "tether mcp tools notes --refresh" in plan.problem
    assert not notes_log.exists()  # building the registry started no server


def test_the_fork_server_warms_what_an_imported_tools_worker_imports(notes: Executor, home: Path) -> None:
    """Every imported tool's worker makes parameter models with jsonschema: it is loaded before the fork."""
    log = home / "logs" / "forkserver.log"
    wait_for(lambda: log.exists() and "preloaded jsonschema" in log.read_text(), what="jsonschema preloaded")


def test_the_allowlist_picks_the_tools_and_names_are_mapped_predictably(
    notes: Executor, home: Path, notes_log: Path
) -> None:
    ids = sorted(spec.task_id for spec in notes.registry if spec.task_id != "mcp.refresh")
    assert ids == [
        "mcp.notes.count_words",  # countWords
        "mcp.notes.crash",
        "mcp.notes.delete_note",
        "mcp.notes.fail",
        "mcp.notes.read_note",
        "mcp.notes.summarize",
        "mcp.notes.wait",
        "mcp.notes.whoami",
    ]
    [plan] = specs.plan(home)
    skipped = {tool.name: tool.skipped for tool in plan.tools if tool.spec is None}
    # read-file and read_file both become mcp.notes.read_file: neither is imported, and it is said
    assert "also becomes mcp.notes.read_file" in skipped["read-file"]
    assert "also becomes mcp.notes.read_file" in skipped["read_file"]

    (home / "settings.toml").write_text(
        server_entry("notes", notes_log, tools=["read_*"], timeout_s=30), encoding="utf-8"
    )
    # the same executor sees the narrower allowlist at once (settings.toml changed): no restart
    assert sorted(s.task_id for s in notes.registry if s.task_id != "mcp.refresh") == ["mcp.notes.read_note"]


def test_a_call_runs_in_a_worker_through_the_executor_and_is_a_job(notes: Executor, notes_log: Path) -> None:
    result = notes.execute_sync("mcp.notes.read_note", {"name": "shopping"}, caller="cli")
    assert result.status is TaskStatus.COMPLETED, result
    assert result.message == "note shopping (short): buy milk"
    assert result.data["structured"] == {"result": "note shopping (short): buy milk"}
    record = notes.jobs.record(result.execution_id)
    assert record.task_id == "mcp.notes.read_note" and record.status == "completed"
    assert [call["tool"] for call in ran(notes_log)] == ["read_note"]
    # the server was the worker's child and ended with the session
    assert exited(ran(notes_log)[0]["pid"])

    counted = notes.execute_sync("mcp.notes.count_words", {"text": "a b c", "limit": 2}, caller="cli")
    assert counted.status is TaskStatus.COMPLETED and counted.data["structured"] == {"words": 2}
    assert ran(notes_log)[-1] == {**ran(notes_log)[-1], "tool": "countWords"}  # the server's own name


def test_arguments_outside_the_servers_schema_are_refused_naming_what_is_allowed_and_nothing_runs(
    notes: Executor, notes_log: Path
) -> None:
    wrong = {
        "mode": ({"name": "a", "mode": "long"}, "allowed: short, full"),
        "type": ({"name": 3}, "name: 3 is not of type 'string'"),
        "missing": ({}, "name: Field required"),
        "unknown": ({"name": "a", "colour": "red"}, "unknown parameter 'colour'; parameters are: name, mode"),
    }
    for why, (params, said) in wrong.items():
        result = notes.execute_sync("mcp.notes.read_note", params, caller="agent")
        assert result.status is TaskStatus.REJECTED, why
        assert said in result.message, (why, result.message)
    assert not notes_log.exists()  # no server was started for any of them


def test_a_destructive_hint_needs_the_persons_confirmation_and_the_call_then_runs_once(
    notes: Executor, notes_log: Path
) -> None:
    spec = notes.registry.spec("mcp.notes.delete_note")
    assert spec.danger is Danger.DESTRUCTIVE
    for caller in ("cli", "agent"):  # destructive: even a typed command confirms
        refused = notes.execute_sync("mcp.notes.delete_note", {"name": "old"}, caller=caller)
        assert refused.status is TaskStatus.REJECTED and refused.data["needs_confirmation"] is True
    assert not notes_log.exists()
    consent = notes.confirm("mcp.notes.delete_note", {"name": "old"}, caller="cli", source="person:test")
    done = notes.execute_sync("mcp.notes.delete_note", {"name": "old"}, caller="cli", confirmation=consent)
    assert done.status is TaskStatus.COMPLETED and done.message == "deleted old"
    assert [call["tool"] for call in ran(notes_log)] == ["delete_note"]
    # a caution tool asks a model's caller first, never the person typing it
    assert notes.registry.spec("mcp.notes.read_note").danger is Danger.CAUTION
    asked = notes.execute_sync("mcp.notes.read_note", {"name": "a"}, caller="agent")
    assert asked.status is TaskStatus.REJECTED and asked.data["danger"] == "caution"


def test_a_stop_of_a_background_call_ends_it_and_no_server_process_survives(
    notes: Executor, notes_log: Path
) -> None:
    started = notes.execute_sync("mcp.notes.wait", {}, caller="cli")
    assert started.status is TaskStatus.RUNNING, started  # background, as the settings say
    server_pid = wait_for(lambda: ran(notes_log), what="the server to start the call")[0]["pid"]
    stopped = asyncio.run(notes.jobs.stop(started.execution_id, reason="test"))
    assert stopped.status is TaskStatus.STOPPED, stopped
    wait_for(lambda: exited(server_pid), what="the server process to end")
    assert notes.jobs.record(started.execution_id).status == "stopped"


def test_a_stop_of_a_foreground_call_ends_it_too(
    home: Path, notes_log: Path, make_executor: Callable[..., Executor]
) -> None:
    (home / "settings.toml").write_text(server_entry("notes", notes_log, tools=["wait"]), encoding="utf-8")
    executor = make_executor(registry)
    refresh(executor)

    async def scenario() -> tuple[TaskStatus, str]:
        call = asyncio.create_task(executor.execute("mcp.notes.wait", {}, caller="cli"))
        while not ran(notes_log) or not executor.store.list(active=True):
            assert not call.done(), call.result()
            await asyncio.sleep(0.02)  # polling observable state: the server said it started
        [record] = executor.store.list(active=True)
        await executor.jobs.stop(record.execution_id, reason="test")
        result = await call
        return result.status, f"{record.execution_id} {result.message}"

    status, said = asyncio.run(scenario())
    execution_id = said.split()[0]
    assert status is TaskStatus.STOPPED, said
    wait_for(lambda: exited(ran(notes_log)[0]["pid"]), what="the server process to end")
    assert executor.jobs.record(execution_id).status == "stopped"


def test_the_servers_progress_reports_become_the_jobs_progress(notes: Executor, home: Path) -> None:
    result = notes.execute_sync("mcp.notes.summarize", {"parts": 3}, caller="cli")
    assert result.status is TaskStatus.COMPLETED and result.message == "summarized 3 parts"
    events = ExecutionPaths(home / "executions" / result.execution_id).events.read_text(encoding="utf-8")
    reports = [json.loads(line) for line in events.splitlines() if '"progress"' in line]
    shown = [
        (r.get("fraction"), r.get("message")) for r in reports if r.get("message", "").startswith("part")
    ]
    assert shown[-1] == (1.0, "part 3 of 3") and len(shown) == 3


def test_a_server_that_crashes_mid_call_fails_the_job_with_its_last_words(notes: Executor) -> None:
    result = notes.execute_sync("mcp.notes.crash", {}, caller="cli")
    assert result.status is TaskStatus.FAILED
    assert "the connection closed (the server exited or crashed)" in result.message
    assert "the disk is on fire" in result.message
    record = notes.jobs.record(result.execution_id)
    assert record.status == "failed" and "crashed" in (record.message or "")


def test_a_tool_that_answers_an_error_fails_with_its_own_words(notes: Executor) -> None:
    result = notes.execute_sync("mcp.notes.fail", {}, caller="cli")
    assert result.status is TaskStatus.FAILED and "the note is locked" in result.message


def test_a_server_that_cannot_start_or_speaks_garbage_fails_the_refresh_clearly(
    home: Path, make_executor: Callable[..., Executor], tmp_path: Path
) -> None:
    garbage = tmp_path / "garbage.py"
    garbage.write_text(
        f"#!{sys.executable}\nimport sys\nfor line in sys.stdin:\n    print('not JSON-RPC', flush=True)\n"
    )
    garbage.chmod(0o700)
    (home / "settings.toml").write_text(
        "[mcp]\ndiscovery_timeout_s = 5\n"
        '[[mcp.servers]]\nname = "gone"\ncommand = "/nonexistent/mcp-server"\ntools = ["*"]\n'
        f'[[mcp.servers]]\nname = "garbage"\ncommand = {json.dumps(str(garbage))}\ntools = ["*"]\n',
        encoding="utf-8",
    )
    executor = make_executor(registry)
    gone = executor.execute_sync("mcp.refresh", {"server": "gone"}, caller="cli")
    assert gone.status is TaskStatus.FAILED
    assert "cannot start the MCP server 'gone'" in gone.message and "No such file" in gone.message
    spoken = executor.execute_sync("mcp.refresh", {"server": "garbage"}, caller="cli")
    assert spoken.status is TaskStatus.FAILED
    assert "the MCP server 'garbage' wrote something that is not MCP (JSON-RPC)" in spoken.message
    assert "not JSON-RPC" in spoken.message  # what it wrote, quoted
    unknown = executor.execute_sync("mcp.refresh", {"server": "nope"}, caller="cli")
    assert unknown.status is TaskStatus.FAILED and "configured: garbage, gone" in unknown.message


def test_a_changed_command_makes_the_kept_list_stale_until_it_is_refreshed(
    notes: Executor, home: Path, notes_log: Path
) -> None:
    settings = home / "settings.toml"
    settings.write_text(settings.read_text().replace('"]\nenv', '", "--stdio"]\nenv'), encoding="utf-8")
    assert [s.task_id for s in notes.registry] == ["mcp.refresh"]
    [plan] = specs.plan(home)
    assert "settings changed since its tools were listed" in plan.problem
    refresh(notes)
    assert "mcp.notes.read_note" in {s.task_id for s in notes.registry}


def test_a_server_that_does_not_answer_in_time_fails_the_call_and_is_ended(
    home: Path, notes_log: Path, make_executor: Callable[..., Executor]
) -> None:
    (home / "settings.toml").write_text(
        server_entry("notes", notes_log, tools=["wait"], timeout_s=1), encoding="utf-8"
    )
    executor = make_executor(registry)
    refresh(executor)
    result = executor.execute_sync("mcp.notes.wait", {"seconds": 60}, caller="cli")
    assert result.status is TaskStatus.FAILED
    assert "the MCP server 'notes' did not answer within 1 s" in result.message
    # (under load the server may not even have reached the call by then: what matters is that none lives)
    wait_for(lambda: not live_servers(notes_log), what="no server process to be left")
