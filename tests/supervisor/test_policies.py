"""The engine's decisions as data: the same plan and recorded state always give the same next move."""

from __future__ import annotations

from typing import Any

import pytest

from tether.store.runs import AttemptRecord, RunRecord, TaskState
from tether.supervisor.plan import Plan
from tether.supervisor.policies import BREAKER_TASK, INTERRUPTIONS, after_attempt, schedule

NOW = 1_800_000_000.0


def plan(*tasks: dict[str, Any], **extra: Any) -> Plan:
    return Plan.model_validate({"caller": "cli", "tasks": list(tasks), **extra})


def call(task_id: str, task: str = "f.safe", **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "call": {"task": task, "args": {"key": task_id}}, **extra}


def state(task_id: str, status: str = "pending", **extra: Any) -> TaskState:
    values: dict[str, Any] = {
        "task_id": task_id,
        "position": 0,
        "status": status,
        "attempts": 0,
        "iterations": 0,
        "message": "",
        "diagnostics": {},
        "outputs": {},
        "review": None,
        "overrides": {},
        "started_at": None,
        "ended_at": None,
        "updated_at": "2026-12-03T00:00:00+00:00",
    }
    values.update(extra)
    return TaskState(**values)


def run(*states: TaskState, status: str = "running", attempts: tuple[AttemptRecord, ...] = ()) -> RunRecord:
    return RunRecord(
        run_id="run-x",
        goal="",
        status=status,
        plan={},
        caller="cli",
        segment=0,
        message="",
        created_at="2026-12-03T00:00:00+00:00",
        updated_at="",
        ended_at=None,
        tasks=states,
        attempts=attempts,
    )


def decide(p: Plan, r: RunRecord, resources: dict[str, tuple[str, ...]] | None = None) -> Any:
    return schedule(p, r, now=NOW, started=NOW - 1, resources=resources or {})


def test_ready_tasks_form_a_wave_bounded_by_max_parallel_and_by_shared_resources() -> None:
    p = plan(call("a", "f.arm"), call("b", "f.arm"), call("c"), call("d"), call("e"), max_parallel=3)
    r = run(*(state(t) for t in "abcde"))
    d = decide(p, r, {"f.arm": ("arm",), "f.safe": ()})
    assert d.run == [("a", 1), ("c", 1), ("d", 1)]  # b waits for the arm, e for a free place


def test_a_task_waits_for_its_dependencies_and_skips_when_one_did_not_succeed() -> None:
    p = plan(call("a"), call("b", depends_on=["a"]))
    assert decide(p, run(state("a", "running", attempts=1), state("b"))).run == [("a", 1)]
    d = decide(p, run(state("a", "rejected"), state("b")))
    assert [(m.task_id, m.status) for m in d.moves] == [("b", "skipped")]
    assert "a did not succeed" in d.moves[0].message


def test_when_runs_a_task_only_if_its_condition_on_an_earlier_task_holds() -> None:
    handler = call("cleanup", depends_on=["risky"], when={"task": "risky", "status": ["failed", "rejected"]})
    p = plan(call("risky"), handler)
    d = decide(p, run(state("risky", "completed"), state("cleanup")))
    assert [(m.task_id, m.status) for m in d.moves] == [("cleanup", "skipped")]
    assert decide(p, run(state("risky", "failed"), state("cleanup"))).run == [("cleanup", 1)]
    # A failure someone handled does not fail the run.
    d = decide(p, run(state("risky", "failed"), state("cleanup", "completed")))
    assert d.end == "completed"


def test_review_before_asks_once_and_an_approval_lets_it_run() -> None:
    p = plan(call("wipe", "f.wipe", review="before"))
    d = decide(p, run(state("wipe")))
    assert [(m.task_id, m.status, (m.review or {}).get("kind")) for m in d.moves] == [
        ("wipe", "waiting_for_human", "before")
    ]
    approved = state("wipe", review={"kind": "before", "answer": "approve"})
    assert decide(p, run(approved)).run == [("wipe", 1)]
    assert decide(p, run(state("wipe", "waiting_for_human"))).end == "waiting_for_human"


@pytest.mark.parametrize(
    ("states", "end"),
    [
        (("completed", "skipped"), "completed"),
        (("completed", "failed"), "failed"),
        (("completed", "cancelled"), "failed"),
    ],
)
def test_the_end_of_a_run(states: tuple[str, str], end: str) -> None:
    p = plan(call("a"), call("b"))
    assert decide(p, run(state("a", states[0]), state("b", states[1]))).end == end


def test_a_cancelled_or_timed_out_run_stops_scheduling() -> None:
    p = plan(call("a"), timeout_s=10)
    assert decide(p, run(state("a"), status="cancelled")).end == "cancelled"
    d = schedule(p, run(state("a")), now=NOW, started=NOW - 11, resources={})
    assert d.end == "failed" and "timed out" in d.message


def test_a_retry_due_later_ends_the_segment_with_the_delay() -> None:
    p = plan(call("a"))
    d = decide(p, run(state("a", overrides={"not_before": NOW + 42})))
    assert d.run == [] and d.end == "later" and d.delay_s == pytest.approx(42)
    assert decide(p, run(state("a", overrides={"not_before": NOW - 1}))).run == [("a", 1)]


def after(
    p: Plan, s: TaskState, outcome: str, *, idempotent: bool = False, failures: int = 0, **kw: Any
) -> Any:
    task = p.tasks[0]
    attempts = tuple(
        AttemptRecord(
            task_id=task.id,
            attempt=i + 1,
            execution_id=f"e{i}",
            status="failed",
            message="",
            how={},
            started_at="",
            ended_at="",
            duration_seconds=0,
        )
        for i in range(failures)
    )
    return after_attempt(
        task,
        s,
        outcome=outcome,
        message=kw.get("message", "it broke"),
        data=kw.get("data", {}),
        idempotent=idempotent,
        now=NOW,
        executor_failures=0,
        context={},
        run=run(s, attempts=attempts),
    )


def test_the_failure_chain_retries_at_once_then_later_with_backoff_then_asks_a_person() -> None:
    p = plan({**call("a"), "retry": {"at_once": 1, "later": 2, "backoff_s": 10}})
    s = state("a", attempts=1)
    first = after(p, s, "failed")
    assert first.status == "pending" and first.overrides["stage"] == {"at_once": 1}
    second = after(p, state("a", attempts=2, overrides=first.overrides), "failed")
    assert second.overrides["not_before"] == NOW + 10
    third = after(p, state("a", attempts=3, overrides=second.overrides), "failed")
    assert third.overrides["not_before"] == NOW + 20  # backoff doubles
    last = after(p, state("a", attempts=4, overrides=third.overrides), "failed", message="disk full")
    assert last.status == "waiting_for_human" and last.review["kind"] == "failed"
    assert last.diagnostics["message"] == "disk full"


def test_the_failure_chain_is_data_its_order_and_stages_are_the_list() -> None:
    from dataclasses import replace as swap

    from tether.supervisor.policies import FAILURE_CHAIN

    assert [stage.key for stage in FAILURE_CHAIN] == ["at_once", "later", "fallback", "simplified"]
    p = plan({**call("a"), "retry": {"at_once": 1, "later": 1, "backoff_s": 10}})
    task, s = p.tasks[0], state("a", attempts=1)
    common: dict[str, Any] = {"message": "it broke", "data": {}, "idempotent": False, "now": NOW,
                              "executor_failures": 0, "context": {}, "run": run(s)}  # fmt: skip
    later_first = (FAILURE_CHAIN[1], FAILURE_CHAIN[0])
    moved = after_attempt(task, s, outcome="failed", chain=later_first, **common)
    assert moved.overrides is not None
    assert moved.overrides["stage"] == {"later": 1} and moved.overrides["not_before"] == NOW + 10
    twice = (swap(FAILURE_CHAIN[0], allowed=lambda t: 2),)
    retried = state("a", attempts=2, overrides={"stage": {"at_once": 1}})
    second = after_attempt(task, retried, outcome="failed", chain=twice, **common)
    assert second.status == "pending" and second.message.startswith("retry 2 at once")
    nothing = after_attempt(task, s, outcome="failed", chain=(), **common)
    assert nothing.status == "waiting_for_human" and (nothing.review or {}).get("kind") == "failed"


def test_an_executor_task_falls_back_to_another_executor_then_a_simpler_description() -> None:
    task = {
        "id": "w",
        "executor": "coder",
        "description": "write the API",
        "retry": {"at_once": 0, "fallback_executor": "senior", "simplified": "write one endpoint"},
    }
    p = plan(task)
    first = after(p, state("w", attempts=1), "failed")
    assert first.status == "pending" and first.overrides["executor"] == "senior"
    second = after(p, state("w", attempts=2, overrides=first.overrides), "failed")
    assert second.overrides["description"] == "write one endpoint"
    third = after(p, state("w", attempts=3, overrides=second.overrides), "failed")
    assert third.status == "waiting_for_human"


def test_unknown_is_retried_only_for_an_idempotent_task() -> None:
    p = plan({**call("a"), "retry": {"at_once": 3}})
    assert after(p, state("a", attempts=1), "unknown", idempotent=True).status == "pending"
    asked = after(p, state("a", attempts=1), "unknown", idempotent=False)
    assert asked.status == "waiting_for_human" and asked.review["kind"] == "unknown"


def test_an_idempotent_task_whose_process_died_runs_again_without_spending_its_retries() -> None:
    """Found by the executor-kill storm: an inline task dies with each executor killed under it, and a few
    kills spent its retries and sent it to a person, though the task never failed. Interruptions have a
    bound of their own (a handler that kills its process every time is a failure after all)."""
    p = plan({**call("a"), "retry": {"at_once": 1}})
    overrides: dict[str, Any] = {}
    inline = {"interrupted": True, "inline": True}
    for n in range(1, INTERRUPTIONS + 1):
        move = after(p, state("a", attempts=n, overrides=overrides), "unknown", idempotent=True, data=inline)
        assert move.status == "pending" and "idempotent: again" in move.message, move
        overrides = move.overrides
        assert overrides["stage"] == {"interrupted": n}  # no retry of its spent
    spent = after(
        p,
        state("a", attempts=INTERRUPTIONS + 1, overrides=overrides),
        "unknown",
        idempotent=True,
        data=inline,
    )
    assert spent.status == "pending" and spent.overrides["stage"]["at_once"] == 1  # its retries, now
    # A worker that died by itself (not with its executor) spends a retry at once.
    worker = after(p, state("a", attempts=1), "unknown", idempotent=True, data={"interrupted": True})
    assert worker.overrides["stage"] == {"at_once": 1}


def test_a_refused_call_is_not_retried_and_the_breaker_skips_a_path_that_keeps_failing() -> None:
    p = plan({**call("a"), "retry": {"at_once": 10}})
    assert after(p, state("a", attempts=1), "rejected").review["kind"] == "refused"
    opened = after(p, state("a", attempts=BREAKER_TASK), "failed", failures=BREAKER_TASK - 1)
    assert opened.status == "waiting_for_human" and opened.review["kind"] == "breaker"


def test_without_a_person_in_the_chain_the_task_fails() -> None:
    p = plan({**call("a"), "retry": {"at_once": 0, "then_ask_person": False}})
    assert after(p, state("a", attempts=1), "failed").status == "failed"


def test_a_loop_repeats_until_its_condition_and_escalates_at_its_bound() -> None:
    loop = {"until": {"task": "poll", "key": "data.value", "equals": 3}, "max_iterations": 2}
    p = plan({**call("poll"), "outputs": ["data.value"], "loop": loop})
    again = after(p, state("poll", attempts=1), "completed", data={"value": 1})
    assert again.status == "pending" and again.iterations == 1
    bound = after(p, state("poll", attempts=2, iterations=1), "completed", data={"value": 2})
    assert bound.status == "waiting_for_human" and bound.review["kind"] == "loop_bound"
    done = after(p, state("poll", attempts=2, iterations=1), "completed", data={"value": 3})
    assert done.status == "completed" and done.outputs == {"data.value": 3}


def test_review_after_pauses_a_completed_task_for_a_person() -> None:
    p = plan({**call("draft"), "review": "after"})
    move = after(p, state("draft", attempts=1), "completed")
    assert move.status == "waiting_for_human" and move.review["kind"] == "after"


def test_an_attempt_that_provably_never_started_runs_again_without_spending_the_chain() -> None:
    p = plan({**call("a", "f.once"), "retry": {"at_once": 0, "then_ask_person": True}})
    move = after(p, state("a", attempts=1, overrides={"stage": {"later": 1}}), "not_started")
    assert move.status == "pending" and move.overrides == {"stage": {"later": 1}}


def test_a_person_is_handed_the_context_the_task_reads() -> None:
    p = plan({**call("deploy"), "inputs": ["design.api", "data.prices"], "retry": {"at_once": 0}})
    task = p.tasks[0]
    context = {"design.api": "POST /login", "data.prices": [1, 2], "data.other": "not read"}
    move = after_attempt(
        task,
        state("deploy", attempts=1),
        outcome="failed",
        message="boom",
        data={},
        idempotent=False,
        now=NOW,
        executor_failures=0,
        context=context,
        run=run(state("deploy", attempts=1)),
    )
    assert move.review is not None and move.review["context"] == {
        "design.api": "POST /login",
        "data.prices": "[1, 2]",
    }
