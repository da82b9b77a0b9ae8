"""OpenTelemetry traces (``tether/telemetry.py``): the tree of a turn after the GenAI conventions, in
memory; a turn's whole trace, its worker's span from another process included, and a flow run's, at a
real OTLP/HTTP receiver on 127.0.0.1; the console exporter's spans on a command's stderr; and nothing of
OpenTelemetry imported when telemetry is off."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helpers import ROOT, tether_cli, wait_for
from tests.support.otlp import Receiver
from tether import telemetry
from tether.agent.roster import agent_of, run_child, session_for
from tether.agent.session import ConversationSession
from tether.agent.team import Team
from tether.config import AgentSettings
from tether.events import EventBus
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths
from tether.store.agents import AgentRecord
from tether.tasks.result import TaskStatus
from tether.testing import ScriptedModel, call, calls, say
from tether.toolkits.standard import registry as standard

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

GOLD = {"instance_type": "拟造花萼（金）", "instance_name": "藏珍之蕾"}
FLOWS = "tests.support.flowkit:flows"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry.reset()
    assert telemetry.configure(exporter=exporter)
    yield exporter
    telemetry.reset()


def hexid(value: int) -> str:
    return f"{value:016x}"


def test_a_turns_tree_holds_its_model_calls_a_delegated_turn_and_a_background_job(
    spans: InMemorySpanExporter, make_executor: Callable[..., Executor], home: Path
) -> None:
    executor = make_executor(standard)
    assert executor.execute_sync("demo.start_game", caller="cli").status is TaskStatus.COMPLETED
    executor.runtime.agents.create(AgentRecord(name="lead", grants=("team", "automation", "jobs"), model="m"))
    lead = ScriptedModel([
        calls(call("agents__delegate", {"to": "automation", "request": "status?"}, id="d1"), usage=(50, 5)),
        calls(call("demo__loop_farm", {**GOLD, "rounds": 2}, id="b1"), usage=(60, 6)),
        say("Listed; farming in the background.", usage=(70, 7)),
    ])  # fmt: skip
    helper = ScriptedModel([calls(call("demo__status", {}), usage=(20, 2)), say("it runs", usage=(30, 3))])
    team = Team(
        executor=executor, agents=executor.runtime.agents, model_for=lambda n: lead if n == "m" else helper,
        threads=executor.runtime.threads, events=EventBus(), settings=AgentSettings(),
        known_models=lambda n: n == "m", runner=run_child,
    )  # fmt: skip
    result = session_for(team, agent_of(team, "lead")).send_sync(
        "boss", "status, then farm in the background"
    )
    assert result.final == "Listed; farming in the background."
    every: list[Any] = list(spans.get_finished_spans())
    finished = {s.name: s for s in every}
    by_id = {hexid(s.context.span_id): s for s in every}

    def parent_of(span: Any) -> Any:
        return by_id.get(hexid(span.parent.span_id)) if span.parent is not None else None

    turn = finished["invoke_agent lead"]
    assert turn.parent is None and turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == "boss"
    assert {s.context.trace_id for s in every} == {turn.context.trace_id}  # one trace
    chats = [s for s in every if s.name == "chat scripted"]
    lead_chats = [s for s in chats if parent_of(s) is turn]
    assert [(c.attributes["gen_ai.usage.input_tokens"], c.attributes["gen_ai.usage.output_tokens"])
            for c in lead_chats] == [(50, 5), (60, 6), (70, 7)]  # fmt: skip
    assert lead_chats[0].attributes["gen_ai.provider.name"] == "scripted"
    assert lead_chats[0].attributes["gen_ai.request.model"] == "scripted"
    # The delegation: its call under the turn, the sub-agent's turn under the call, and its own calls.
    delegate = finished["execute_tool agents.delegate"]
    assert parent_of(delegate) is turn and delegate.attributes["gen_ai.tool.call.id"] == "d1"
    sub = next(s for s in every if s.name.startswith("invoke_agent") and s is not turn)
    assert parent_of(sub) is delegate
    listed = finished["execute_tool demo.status"]
    assert parent_of(listed) is sub and listed.attributes["tether.task.status"] == "completed"
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats if parent_of(c) is sub] == [20, 30]
    # The background job: its call under the turn, ended at the handshake; its worker's request carries
    # the call's traceparent, so the worker's span hangs under it for as long as it runs.
    job = finished["execute_tool demo.loop_farm"]
    assert parent_of(job) is turn and job.attributes["tether.task.status"] == "running"
    execution_id = job.attributes["tether.execution.id"]
    request = json.loads((ExecutionPaths.of(home, str(execution_id)).request).read_text())
    assert request["trace"] == f"00-{job.context.trace_id:032x}-{hexid(job.context.span_id)}-01"


def test_a_chat_span_says_why_the_model_stopped_when_the_model_said_it(
    spans: InMemorySpanExporter, executor: Executor
) -> None:
    model = ScriptedModel(
        [calls(call("demo__status", {})), say("the game is not running", finish_reason="stop")]
    )
    result = ConversationSession(executor, model).send_sync("why", "is the game running?")
    assert result.final == "the game is not running"
    every: list[Any] = list(spans.get_finished_spans())
    (turn,) = [s for s in every if s.name.startswith("invoke_agent")]
    chats = [s for s in every if s.name == "chat scripted"]
    assert [c.parent.span_id for c in chats] == [turn.context.span_id] * 2
    # The first answer (tool calls) gave no reason: the attribute is left out, not sent empty.
    assert [c.attributes.get("gen_ai.response.finish_reasons") for c in chats] == [None, ("stop",)]


def test_a_turns_trace_arrives_at_an_otlp_receiver_as_one_tree_with_its_workers_span(
    home: Path, receiver: Receiver
) -> None:
    (home / "settings.toml").write_text(
        f'[telemetry]\nexporter = "otlp"\notlp_endpoint = "{receiver.url}"\nservice_name = "tether-test"\n',
        encoding="utf-8",
    )
    code, out, err = tether_cli("run", "start the game", "--new-thread", "otel1", "--json", home=home,
                                TETHER_CLI_SERVER="0")  # fmt: skip
    assert code == 0, (out, err)

    def whole() -> list[dict[str, Any]] | None:
        names = [s["name"] for s in receiver.spans]
        return (
            receiver.spans
            if "tether.worker demo.start_game" in names and "invoke_agent assistant" in names
            else None
        )

    spans = wait_for(whole, timeout=30, what="the turn's spans and its worker's at the receiver")
    by_id = {s["id"]: s for s in spans}
    (root,) = [s for s in spans if s["parent"] is None]
    assert (
        root["name"] == "invoke_agent assistant" and root["attributes"]["gen_ai.conversation.id"] == "otel1"
    )
    assert {s["trace"] for s in spans} == {root["trace"]}, "one trace"
    for span in spans:  # every span reaches the turn through spans that arrived: one tree
        seen = span
        while seen["parent"] is not None:
            seen = by_id[seen["parent"]]
        assert seen is root, span
    tool = next(s for s in spans if s["name"] == "execute_tool demo.start_game")
    worker = next(s for s in spans if s["name"] == "tether.worker demo.start_game")
    assert tool["parent"] == root["id"] and worker["parent"] == tool["id"]
    assert worker["attributes"]["tether.execution.id"] == tool["attributes"]["tether.execution.id"]
    chat = next(s for s in spans if s["name"] == "chat offline")
    assert chat["attributes"]["gen_ai.provider.name"] == "offline"
    assert "gen_ai.usage.input_tokens" not in chat["attributes"]  # the offline model reports none
    assert {s["service"] for s in spans} == {"tether-test"}


def test_a_workers_span_goes_where_the_standard_variables_send_its_callers(
    home: Path, receiver: Receiver
) -> None:
    """Review: the docstring said the standard OTEL_* variables were honoured, but a worker's allowlisted
    environment left them behind, so its span went to the SDK's default endpoint and never arrived."""
    (home / "settings.toml").write_text('[telemetry]\nexporter = "otlp"\n', encoding="utf-8")
    code, out, err = tether_cli("run", "start the game", "--new-thread", "otel2", "--json", home=home,
                                TETHER_CLI_SERVER="0", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.url,
                                OTEL_SERVICE_NAME="tether-by-variable")  # fmt: skip
    assert code == 0, (out, err)

    def worker() -> dict[str, Any] | None:
        return next((s for s in receiver.spans if s["name"] == "tether.worker demo.start_game"), None)

    span = wait_for(worker, timeout=30, what="the worker's span at the receiver the variable names")
    assert span["service"] == "tether-by-variable"


def test_a_flow_runs_trace_holds_one_flow_task_span_per_attempt_under_the_runs_span(
    home: Path, tmp_path: Path, receiver: Receiver
) -> None:
    (home / "settings.toml").write_text(
        f'[telemetry]\nexporter = "otlp"\notlp_endpoint = "{receiver.url}"\n', encoding="utf-8"
    )
    flaky = {"id": "flaky", "call": {"task": "f.once", "args": {"key": "flaky", "fail_first": 1}},
             "retry": {"at_once": 1}}  # fmt: skip
    flow = tmp_path / "flow.yaml"
    flow.write_text(yaml.safe_dump({"caller": "cli", "tasks": [flaky]}), encoding="utf-8")
    code, out, err = tether_cli("--registry", FLOWS, "flow", "run", str(flow), "--json", home=home,
                                TETHER_CLI_SERVER="0")  # fmt: skip
    assert code == 0, (out, err)
    run_id = json.loads(out.strip().splitlines()[-1])["run_id"]

    def whole() -> list[dict[str, Any]] | None:
        names = [s["name"] for s in receiver.spans]
        ended = f"invoke_workflow {run_id}" in names
        return receiver.spans if ended and names.count("tether.worker f.once") == 2 else None

    spans = wait_for(whole, timeout=30, what="the run's span and both attempts' workers' at the receiver")
    (run,) = [s for s in spans if s["name"] == f"invoke_workflow {run_id}"]
    assert run["parent"] is None and run["attributes"]["tether.run.status"] == "completed"
    tasks = sorted(
        (s for s in spans if s["name"] == "flow_task flaky"), key=lambda s: s["attributes"]["tether.attempt"]
    )
    assert [t["parent"] for t in tasks] == [run["id"], run["id"]]
    assert [(t["attributes"]["tether.attempt"], t["attributes"]["tether.task.status"]) for t in tasks] == [
        (1, "failed"), (2, "completed"),
    ]  # fmt: skip
    assert {t["attributes"]["tether.run.id"] for t in tasks} == {run_id}
    # Ids derived from the run and the attempt: a recovered segment's spans join the same tree.
    assert (run["trace"], run["id"]) == telemetry.ids_for(f"run:{run_id}")
    assert [t["id"] for t in tasks] == [telemetry.ids_for(f"run:{run_id}:flaky:{n}")[1] for n in (1, 2)]
    workers = [s for s in spans if s["name"] == "tether.worker f.once"]
    assert sorted(w["parent"] for w in workers) == sorted(t["id"] for t in tasks)  # each under its attempt


def console_spans(text: str) -> list[dict[str, Any]]:
    """The spans the SDK's console exporter wrote into ``text``: an indented JSON object each."""
    decoder, found = json.JSONDecoder(), []
    for start in re.finditer(r"^\{$", text, re.MULTILINE):
        try:
            value, _ = decoder.raw_decode(text, start.start())
        except ValueError:
            continue
        if isinstance(value, dict) and "name" in value and "context" in value:
            found.append(value)
    return found


def test_the_console_exporter_writes_a_commands_spans_to_stderr_and_leaves_its_json_alone(home: Path) -> None:
    (home / "settings.toml").write_text('[telemetry]\nexporter = "console"\n', encoding="utf-8")
    code, out, err = tether_cli("run", "start the game", "--new-thread", "console1", "--json", home=home,
                                TETHER_CLI_SERVER="0")  # fmt: skip
    assert code == 0, (out, err)
    assert json.loads(out)["status"] == "completed"  # stdout is the one document a script reads
    spans = {s["name"]: s for s in console_spans(err)}
    turn, tool = spans["invoke_agent assistant"], spans["execute_tool demo.start_game"]
    assert turn["parent_id"] is None and turn["attributes"]["gen_ai.conversation.id"] == "console1"
    assert tool["parent_id"] == turn["context"]["span_id"]
    assert tool["attributes"]["tether.task.status"] == "completed"


def test_with_telemetry_off_no_opentelemetry_module_is_imported_by_a_turn_or_its_worker(
    make_executor: Callable[..., Executor], home: Path
) -> None:
    """A real process runs a turn whose tool runs in a worker; neither imports ``opentelemetry``."""
    script = (
        "import json, sys\n"
        "from tether.agent.session import ConversationSession\n"
        "from tether.execution.executor import Executor\n"
        "from tether.models.offline import OfflineModel\n"
        "from tests.support.probe import registry\n"
        "with Executor(registry, home=sys.argv[1]) as executor:\n"
        "    session = ConversationSession(executor, OfflineModel())\n"
        "    result = session.send_sync('quiet', 'report the modules')\n"
        "    data = [s.result for s in result.steps if s.kind == 'tool' and s.result]\n"
        "found = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "print(json.dumps({'turn': found, 'data': data}))\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script, str(home)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout.strip().splitlines()[-1])
    assert found["turn"] == [], found["turn"]
    (tool,) = found["data"]
    assert tool["status"] == "completed" and tool["data"]["opentelemetry"] == [], tool


def test_a_turn_recovered_after_its_executor_was_killed_continues_its_trace_as_one_tree(
    home: Path, tmp_path: Path, receiver: Receiver, fake_openai: Any
) -> None:
    """A goal run's agent turn: its executor is killed while the turn's tool runs; the next executor
    replays the turn. What the dead process sent (the first model call) and what the next one sends hang
    together under the run's span, the turn's span having the id the dead process gave it."""
    import os
    import signal

    from tests.supervisor.test_engine import _settle, _stop, _worker, cli, flow_file, tool_running, use_model
    from tests.support.fake_openai import completion

    use_model(home, fake_openai)
    with (home / "settings.toml").open("a", encoding="utf-8") as settings:
        settings.write(f'\n[telemetry]\nexporter = "otlp"\notlp_endpoint = "{receiver.url}"\n')
    fake_openai.reply(completion(None, tool_calls=[("c1", "f__once", '{"key": "slow", "until_file": "go"}')]))
    fake_openai.reply(completion("done once"))
    env = {"TETHER_MODEL_STREAM": "0", "OTEL_BSP_SCHEDULE_DELAY": "20"}  # a span is sent as it ends
    first = _worker(home, **env)
    second = None
    try:
        tasks = [{"id": "agent", "executor": "agent", "description": "do the slow work once"}]
        code, run, err = cli(home, "flow", "run", str(flow_file(tmp_path, tasks)), "--detach", "--json")
        assert code == 0, (run, err)
        wait_for(lambda: tool_running(home), timeout=60, what="the agent's tool to run")
        said = lambda: any(s["name"].startswith("chat ") for s in receiver.spans)  # noqa: E731
        wait_for(said, timeout=30, what="the first chat span")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        second = _worker(home, **env)
        (home / "go").touch()  # the tool, live across the crash, may end now
        final = _settle(home, run["run_id"])
    finally:
        for proc in (first, second):
            if proc is not None:
                _stop(proc)
    assert final["status"] == "completed", final

    def ended() -> list[dict[str, Any]] | None:
        names = [s["name"] for s in receiver.spans]
        return receiver.spans if f"invoke_workflow {run['run_id']}" in names else None

    spans = wait_for(ended, timeout=30, what="the run's span")
    by_id = {s["id"]: s for s in spans}
    (root,) = {s["id"]: s for s in spans if s["parent"] is None}.values()
    assert root["name"] == f"invoke_workflow {run['run_id']}"
    assert {s["trace"] for s in spans} == {root["trace"]}
    for span in spans:
        seen = span
        while seen["parent"] is not None:
            seen = by_id[seen["parent"]]  # a parent that never arrived would break the tree here
        assert seen["id"] == root["id"], span
    chats = [s for s in spans if s["name"].startswith("chat ")]
    turns = {s["id"] for s in spans if s["name"].startswith("invoke_agent")}
    assert len(chats) == 2 and {c["parent"] for c in chats} <= turns and len(turns) == 1, spans
    # The tool's worker (it outlived the first executor) hangs under the call, whichever process ended it.
    (worker,) = [s for s in spans if s["name"] == "tether.worker f.once"]
    assert by_id[worker["parent"]]["name"] == "execute_tool f.once"
    assert by_id[by_id[worker["parent"]]["parent"]]["id"] in turns
