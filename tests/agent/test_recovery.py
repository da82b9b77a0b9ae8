"""A turn whose process dies is recovered by the next turn on its thread, with real processes and kills.

Nothing runs twice by accident: a published outcome is adopted, a live job is left alone, a worker that
died mid-run is re-run only when its task is idempotent and safe, and is otherwise reported ``unknown``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import ROOT, exited, wait_for
from tether.agent.session import ConversationSession
from tether.execution.admission import execution_id_for
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths, read_claim
from tether.testing import ScriptedModel, say

TURN = """
import sys
from pathlib import Path
from tests.support.helpers import FAST
from tests.support.registry import registry
from tether.agent.session import ConversationSession
from tether.execution.executor import Executor
from tether.testing import ScriptedModel, call, calls, say
home, tool = Path(sys.argv[1]), sys.argv[2]
executor = Executor(registry, home=home, settings=FAST)
model = ScriptedModel([calls(call(tool, id="c1"), call("t__quick", id="c2")), say("done")])
ConversationSession(executor, model).send_sync("th", "do it")
"""


def run_turn_and_kill(home: Path, tool: str, mark: str, *, kill_worker: bool) -> str:
    """Start a turn in another process, kill it (and its worker) while the tool runs; the job's id."""
    proc = subprocess.Popen([sys.executable, "-c", TURN, str(home), tool], cwd=ROOT)
    try:
        # Its content, not the file: a kill between the file's creation and its write left it empty (seen
        # on a loaded machine), and the test then read no effect where there was to be one.
        wait_for(lambda: (home / mark).exists() and (home / mark).read_text(), what="the tool to act")
        execution_id = execution_id_for("th", "1", "1")
        claim = wait_for(lambda: read_claim(ExecutionPaths.of(home, execution_id)), what="the claim")
        if kill_worker:
            # Freeze the turn's process first, so it cannot watch its worker die and record that.
            proc.send_signal(signal.SIGSTOP)
            os.killpg(claim.pid, signal.SIGKILL)  # the worker dies mid-effect …
            wait_for(lambda: exited(claim.pid), what="the worker to die")
        proc.kill()  # … and so does the process that ran the turn
    finally:
        proc.wait(timeout=60)
    return execution_id


def steps_of(support: Executor, turn: int) -> list[Any]:
    return support.runtime.threads.steps("th", turn)


def next_turn(support: Executor) -> tuple[ScriptedModel, Any]:
    model = ScriptedModel([say("checked")])
    result = ConversationSession(support, model).send_sync("th", "what happened?")
    return model, result


def test_the_step_is_on_record_as_started_before_the_process_died(support: Executor, home: Path) -> None:
    execution_id = run_turn_and_kill(home, "t__marks_and_waits", "acted", kill_worker=True)
    tool = steps_of(support, 1)[1]
    assert (tool.kind, tool.status, tool.execution_id) == ("tool", "started", execution_id)
    job = support.store.get(execution_id)
    assert job is not None and job.origin == "thread:th" and job.step_id == "th:1:1"


def test_a_worker_that_died_mid_run_is_reported_unknown_not_run_again(support: Executor, home: Path) -> None:
    run_turn_and_kill(home, "t__marks_and_waits", "acted", kill_worker=True)
    model, result = next_turn(support)
    assert (home / "acted").read_text() == "x"  # it acted once, and was not run again
    turn = support.runtime.threads.turn("th", 1)
    assert turn is not None and turn.status == "recovered"
    settled = {s.call_id: s.result for s in steps_of(support, 1) if s.kind == "tool"}
    assert settled["c1"]["status"] == "unknown" and "may or may not" in settled["c1"]["message"]
    assert settled["c2"]["status"] == "skipped"  # never reached: answered, not run
    # The next request is a valid conversation: every call of the dead turn has its answer.
    messages = model.requests[0][0]
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or []]
    answers = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == ["c1", "c2"] and sorted(answers) == ["c1", "c2"]
    assert result.status == "completed"


def test_an_idempotent_task_that_died_mid_run_is_run_again(support: Executor, home: Path) -> None:
    run_turn_and_kill(home, "t__idempotent_work", "idem", kill_worker=True)
    next_turn(support)
    settled = {s.call_id: s.result for s in steps_of(support, 1) if s.kind == "tool"}
    assert settled["c1"]["status"] == "completed" and settled["c1"]["message"] == "already done", settled
    assert settled["c1"]["data"]["rerun_of"] == execution_id_for("th", "1", "1")


def test_a_worker_that_outlived_its_turn_is_adopted_as_it_ended(support: Executor, home: Path) -> None:
    execution_id = run_turn_and_kill(home, "t__marks_and_waits", "acted", kill_worker=False)
    # Not detached: the worker sees its starter gone and stops itself; the record says how it ended.
    wait_for(lambda: support.jobs.status(execution_id).status.terminal, what="the worker to stop itself")
    next_turn(support)
    settled = {s.call_id: s.result for s in steps_of(support, 1) if s.kind == "tool"}
    assert settled["c1"]["status"] == "stopped" and settled["c1"]["execution_id"] == execution_id
    assert (home / "acted").read_text() == "x"


def test_running_the_same_step_again_never_starts_a_second_worker(support: Executor, home: Path) -> None:
    """Contract 11: a step's execution id is deterministic; a second call adopts the first."""
    execution_id = execution_id_for("th", "9", "1")
    first = support.execute_sync("t.destroys", {"what": "x"}, caller="cli", execution_id=execution_id,
                                 confirmation=support.confirm("t.destroys", {"what": "x"}, caller="cli",
                                                              source="person:test"))  # fmt: skip
    again = support.execute_sync("t.destroys", {"what": "x"}, caller="cli", execution_id=execution_id)
    assert first.status.value == again.status.value == "completed"
    assert again.data["attached"] is True and (home / "destroyed").read_text() == "x"
    with pytest.raises(Exception, match="already belongs to"):
        support.execute_sync("t.quick", caller="cli", execution_id=execution_id)


def test_another_homes_interrupted_turn_is_answered_never_run_again_here(tmp_path: Path) -> None:
    """Two homes on one database continue one thread: home A settling home B's dead turn must not run
    B's step again in A (another host, perhaps) nor wait for it; B's outcome is known on B's host."""
    from tests.support.helpers import FAST
    from tests.support.registry import registry
    from tether.runtime import Runtime

    database = tmp_path / "shared.db"
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "settings.toml").write_text(f'[store]\ndatabase_url = "sqlite:///{database}"\n')
    execution_id = run_turn_and_kill(b, "t__idempotent_work", "idem", kill_worker=True)
    with Runtime.open(b) as runtime_b:  # B's next command sees its turn's process gone
        runtime_b.threads.interrupt_orphans(lambda pid, started: False)
    executor = Executor(registry, home=a, settings=FAST)
    try:
        model = ScriptedModel([say("checked")])
        ConversationSession(executor, model).send_sync("th", "what happened?")
        settled = {
            s.call_id: s.result or {} for s in executor.runtime.threads.steps("th", 1) if s.kind == "tool"
        }
        assert settled["c1"]["status"] == "unknown" and "another tether home" in settled["c1"]["message"]
        assert settled["c1"]["execution_id"] == execution_id
        assert not (a / "idem").exists()  # never run again in this home
    finally:
        executor.close()


def test_a_call_whose_process_died_before_its_worker_began_runs_again(support: Executor, home: Path) -> None:
    """Found by the executor-kill storm: the turn's process died after putting the call on record and
    before starting its worker. The call provably never ran (its claim is abandoned, so it never will):
    it is run again, whatever its task, instead of being reported to the model as a failure."""
    env = {**os.environ, "TETHER_FAULTS": "executor.before_spawn=kill"}
    proc = subprocess.Popen([sys.executable, "-c", TURN, str(home), "t__marks"], cwd=ROOT, env=env)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    execution_id = execution_id_for("th", "1", "1")
    assert support.store.get(execution_id) is not None and not (home / "handler-ran").exists()
    _, result = next_turn(support)
    settled = {s.call_id: s.result or {} for s in steps_of(support, 1) if s.kind == "tool"}
    assert settled["c1"]["status"] == "completed", settled["c1"]
    assert settled["c1"]["data"]["rerun_of"] == execution_id
    assert (home / "handler-ran").read_text() == "yes"
    assert settled["c2"]["status"] == "skipped"
    assert result.status == "completed"
