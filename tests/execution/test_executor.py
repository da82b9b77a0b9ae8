import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.errors import ConfigError
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths, read_request, read_result
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import Registry, TaskSpec
from tether.toolkits.demo import game
from tether.toolkits.demo.catalog import CALYX_GOLD, INSTANCE_NAMES, INSTANCE_TYPES

GOLD = {"instance_type": CALYX_GOLD, "instance_name": "藏珍之蕾"}


def counters(home: Path) -> dict[str, Any]:
    return game.load_state(home)


def test_every_outcome_is_a_structured_result(executor: Executor) -> None:
    for task_id, params in [("demo.status", {}), ("demo.nope", {}), ("demo.farm_instance", {"x": 1})]:
        result = executor.execute_sync(task_id, params, caller="agent")
        assert isinstance(result, TaskResult)
        assert result.execution_id and result.task_id == task_id


def test_unknown_and_unexposed_tasks_are_not_found(executor: Executor) -> None:
    unknown = executor.execute_sync("demo.nope", caller="agent")
    hidden = executor.execute_sync("demo.debug_crash", caller="agent")
    assert unknown.status is hidden.status is TaskStatus.NOT_FOUND
    # Indistinguishable from a task that does not exist: same wording, no hint that it is there.
    assert hidden.message == "no task 'demo.debug_crash' is available to agent"
    assert hidden.data == {"similar": []}
    typo = executor.execute_sync("demo.farm_instanse", caller="agent")
    assert typo.data["similar"][0] == "demo.farm_instance"


def test_every_execution_has_a_job_record(executor: Executor) -> None:
    results = [
        executor.execute_sync("demo.status", caller="agent"),
        executor.execute_sync("demo.nope", caller="agent"),
        executor.execute_sync("demo.salvage_relics", {"rarity": 4}, caller="agent"),
    ]
    for result in results:
        record = executor.store.get(result.execution_id)
        assert record is not None and record.status is result.status


def test_invalid_caller_is_misuse_not_a_result(executor: Executor) -> None:
    with pytest.raises(ConfigError, match="caller"):
        executor.execute_sync("demo.status", caller="")


def test_catalog_alias_is_rejected_before_any_worker_starts(running_game: Executor, home: Path) -> None:
    result = running_game.execute_sync(
        "demo.farm_instance", {"instance_type": CALYX_GOLD, "instance_name": "金币"}, caller="agent"
    )
    assert result.status is TaskStatus.REJECTED
    assert result.data["allowed"] == list(INSTANCE_NAMES[CALYX_GOLD].values)
    assert not ExecutionPaths.of(home, result.execution_id).dir.exists()
    assert counters(home)["farm_attempts_total"] == 0


def test_destructive_without_confirmation_never_reaches_the_handler(
    running_game: Executor, home: Path
) -> None:
    refused = running_game.execute_sync("demo.salvage_relics", {"rarity": 4}, caller="agent")
    assert refused.status is TaskStatus.REJECTED and refused.data["needs_confirmation"] is True
    assert counters(home)["salvaged_total"] == 0
    consent = running_game.confirm("demo.salvage_relics", {"rarity": 4}, caller="cli", source="person:test")
    done = running_game.execute_sync("demo.salvage_relics", {"rarity": 4}, caller="cli", confirmation=consent)
    assert done.status is TaskStatus.COMPLETED, done
    assert counters(home)["salvaged_total"] == 2  # exactly once
    assert running_game.jobs.record(done.execution_id).confirmed_by == "person:test"


def test_unmet_precondition_is_rejected_with_the_reason(executor: Executor) -> None:
    result = executor.execute_sync("demo.farm_instance", {**GOLD, "attempts": 1}, caller="agent")
    assert result.status is TaskStatus.REJECTED
    assert "not running" in result.message and result.data["unmet"] == ["game_running"]


def test_sync_task_runs_in_a_worker_and_completes_exactly_once(running_game: Executor, home: Path) -> None:
    result = running_game.execute_sync("demo.farm_instance", {**GOLD, "attempts": 3}, caller="agent")
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["attempts_done"] == 3
    assert counters(home)["farm_attempts_total"] == 3
    paths = ExecutionPaths.of(home, result.execution_id)
    assert read_request(paths).params == {**GOLD, "attempts": 3}
    published = read_result(paths)
    assert published is not None and published.status is TaskStatus.COMPLETED
    assert paths.events.exists() and paths.log.exists()


def test_background_returns_running_only_after_the_handshake(running_game: Executor, home: Path) -> None:
    result = running_game.execute_sync("demo.loop_farm", caller="agent")
    assert result.status is TaskStatus.RUNNING
    published = read_result(ExecutionPaths.of(home, result.execution_id))
    assert published is not None and published.status is TaskStatus.RUNNING
    record = running_game.store.get(result.execution_id)
    assert record is not None and record.status is TaskStatus.RUNNING and record.pid == result.data["pid"]


def test_second_job_on_a_busy_resource_is_told_who_holds_it(running_game: Executor) -> None:
    loop = running_game.execute_sync("demo.loop_farm", caller="agent")
    other = running_game.execute_sync("demo.daily_training", caller="agent")
    assert other.status is TaskStatus.REJECTED
    assert other.data["blocked_by"] == loop.execution_id
    # Status needs no lock, so it still answers while the lock is held.
    assert running_game.execute_sync("demo.status", caller="agent").data["running"] is True


def test_worker_rechecks_the_lock_even_when_the_store_shows_nothing(
    running_game: Executor, home: Path
) -> None:
    from tether.execution.lock import ResourceLock

    outside = ResourceLock(home, "automation")
    outside.acquire(execution_id="outsider", task_id="someone.else")
    try:
        result = running_game.execute_sync("demo.daily_training", caller="cli")
        hidden = running_game.execute_sync("demo.daily_training", caller="agent")
    finally:
        outside.release()
    assert result.status is TaskStatus.REJECTED
    assert result.data["blocked_by"] == "outsider"
    # A model is not told about jobs it may not see.
    assert hidden.status is TaskStatus.REJECTED and "outsider" not in hidden.model_dump_json()


def test_handler_errors_become_failed_results(support: Executor) -> None:
    raised = support.execute_sync("t.raises", caller="agent")
    assert raised.status is TaskStatus.FAILED and "RuntimeError: boom" in raised.message
    missing = support.execute_sync("t.missing_handler", caller="agent")
    assert missing.status is TaskStatus.FAILED and "cannot import" in missing.message
    bad = support.execute_sync("t.returns_bad", caller="agent")
    assert bad.status is TaskStatus.FAILED and "TypeError" in bad.message


def test_sync_timeout_stops_the_worker_and_fails(support: Executor) -> None:
    result = support.execute_sync("t.sleeps", caller="agent")
    assert result.status is TaskStatus.FAILED, result
    assert "timed out after 0.5s" in result.message
    assert result.data["stop_reason"] == "timeout"


def test_cancelling_a_sync_call_stops_its_worker(running_game: Executor, home: Path) -> None:
    started: list[str] = []

    async def scenario() -> None:
        call = asyncio.create_task(
            running_game.execute(
                "demo.farm_instance", {**GOLD, "attempts": 99}, caller="agent", on_start=started.append
            )
        )
        deadline = asyncio.get_running_loop().time() + 15
        # Another process's state: there is no event to await, so poll it with a deadline.
        while not started or running_game.jobs.status(started[0]).status is not TaskStatus.RUNNING:
            assert asyncio.get_running_loop().time() < deadline, "the worker never reported running"
            await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(scenario())
    final = running_game.jobs.status(started[0])
    assert final.status is TaskStatus.STOPPED
    assert final.data["stop_reason"] == "cancelled"


def test_registry_without_ref_cannot_start_workers(home: Path) -> None:
    registry = Registry()
    registry.add(TaskSpec(task_id="x.y", handler="x:y", exposed_to=frozenset({"cli"}), resources=()))
    with Executor(registry, home=home) as executor, pytest.raises(ConfigError, match="ref"):
        executor.execute_sync("x.y", caller="cli")


# -- fuzzing the boundary --------------------------------------------------------------------------

anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            *INSTANCE_TYPES.values,
            *INSTANCE_NAMES[CALYX_GOLD].values,
            "金币",
            "gold",
            "拟造花萼(金)",
            "3",
            "-1",
        ]
    ),
    st.lists(st.text(max_size=3), max_size=3),
)
fuzz_params = st.one_of(
    st.dictionaries(
        st.sampled_from(["instance_type", "instance_name", "attempts", "confirmed", "x"]), anything
    ),
    anything,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task_id=st.sampled_from(["t.checks_params", "t.internal", "t.nope", "", "T.CHECKS"]), params=fuzz_params
)
def test_fuzzed_calls_never_raise_and_never_reach_a_handler_with_invalid_values(
    support: Executor, task_id: str, params: Any
) -> None:
    result = support.execute_sync(task_id, params, caller="agent")
    # checks_params fails its result if anything invalid got through; nothing else may be reached.
    assert result.status in (TaskStatus.COMPLETED, TaskStatus.REJECTED, TaskStatus.NOT_FOUND), result
    if result.status is TaskStatus.COMPLETED:
        assert task_id == "t.checks_params"


def test_a_result_reads_the_same_however_the_worker_ending_is_seen(
    support: Executor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (CI): when the worker published and exited between the executor's two looks, the answer
    carried the job record's bookkeeping (pid, times) — a different document for the same outcome. The
    executor is held right before its liveness look until the worker has published and exited."""
    import threading

    from tests.support.helpers import exited, wait_for
    from tether.execution import faults
    from tether.execution.protocol import read_claim, read_result

    normal = support.execute_sync("t.quick", caller="cli")
    go = tmp_path / "go"
    monkeypatch.setenv(faults.FAULTS_ENV, f"executor.before_liveness=wait:{go}")
    faults.reload()
    started: list[str] = []

    def release() -> None:
        eid = wait_for(lambda: started[0] if started else None, what="the start")
        paths = support.jobs.paths(eid)
        claim = wait_for(lambda: read_claim(paths), what="the worker's claim")
        wait_for(lambda: read_result(paths) is not None and exited(claim.pid), what="the worker's end")
        go.touch()

    helper = threading.Thread(target=release, daemon=True)
    helper.start()
    try:
        raced = asyncio.run(support.execute("t.quick", caller="cli", on_start=started.append))
    finally:
        monkeypatch.delenv(faults.FAULTS_ENV)
        faults.reload()
    helper.join(timeout=30)
    assert raced.status is TaskStatus.COMPLETED
    assert raced.model_dump().keys() == normal.model_dump().keys() and raced.data == normal.data


def test_a_finished_execution_leaves_its_request_and_its_result(support: Executor, home: Path) -> None:
    """Issue 20: an execution left seven entries behind (claim, lock, exit code, an empty log, the
    doorbell); the claim and the exit code now live in result.json, the lock is the folder's own, and
    the reaper removes the doorbell and a log nothing was written to."""
    from tests.support.helpers import wait_for
    from tether.execution.protocol import read_claim, read_exit

    result = support.execute_sync("t.quick", caller="cli")
    assert result.status is TaskStatus.COMPLETED
    paths = ExecutionPaths.of(home, result.execution_id)
    wait_for(lambda: read_exit(paths) == 0, what="the reaper to record the exit code")
    wait_for(lambda: sorted(p.name for p in paths.dir.iterdir()) == ["request.json", "result.json"],
             what="only the request and the result to be left")  # fmt: skip
    claim = read_claim(paths)
    assert claim is not None and claim.worker and claim.pid == support.jobs.store.get(result.execution_id).pid  # type: ignore[union-attr]
    published = read_result(paths)
    assert published is not None and published.status is TaskStatus.COMPLETED


def test_a_quick_task_is_put_on_record_in_two_writes_and_a_slow_one_shows_it_runs(
    support: Executor, home: Path
) -> None:
    """Issue 20: every process task paid four store transactions (the row, its worker's pid,
    ``running``, the outcome). A task that ends within ``DEFER_S`` gets the row and one terminal write
    carrying the rest; one that runs longer shows ``running`` and its worker while it runs."""
    import threading

    from sqlalchemy import event

    from tests.support.helpers import wait_for

    writes: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE")) and " jobs" in statement:
            writes.append(statement.split()[0].upper())

    engine = support.runtime.db.engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        assert support.execute_sync("t.quick", caller="cli").status is TaskStatus.COMPLETED
        assert writes == ["INSERT", "UPDATE"], writes
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    slow = threading.Thread(target=support.execute_sync, args=("t.waits_for_go",), kwargs={"caller": "cli"})
    slow.start()
    try:
        wait_for(lambda: (home / "waiting").exists(), what="the task to run")
        running = wait_for(
            lambda: next(
                (r for r in support.store.list(active=True) if r.status is TaskStatus.RUNNING), None
            ),
            what="the running task on record",
        )
        assert running.pid is not None and running.task_id == "t.waits_for_go"
    finally:
        (home / "go").touch()
        slow.join(timeout=30)
