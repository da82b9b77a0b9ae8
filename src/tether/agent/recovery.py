"""Recovering a turn whose process died (contract 11 for conversations).

The next turn on the thread finds the dead turn (``begin_turn`` marked it ``interrupted``) and settles
it before anything else, so the conversation is whole again and nothing runs twice by accident:

- a tool step recorded ``started`` is looked up through its execution id: a published outcome is
  adopted; a live job is reported as it is (it goes on); a call that never reached the executor is
  answered "not run"; a call on record whose process died before its worker began provably never ran
  (its claim is given up), so it is run again, whatever its task (a replayed durable turn does the same:
  ``ToolCalls.once``);
- a worker that died mid-run may or may not have acted: the step is re-run (under a new, derived
  execution id) only when its task is ``idempotent`` and ``safe``; otherwise it is answered ``unknown``,
  for the model and the person to check the world;
- every call the model made in that turn gets an answer, so the next request is a valid conversation.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tether.agent.calls import ToolCalls, again_id, never_began
from tether.agent.skillruns import SKILL_RUN, run_id_for
from tether.agent.team import child_thread
from tether.events import ToolFinished
from tether.execution import process
from tether.models.base import ToolOutcome
from tether.store.threads import StepRecord, ThreadState
from tether.tasks.grants import DELEGATE
from tether.tasks.result import TaskStatus
from tether.tasks.spec import Danger

INTERRUPTED = "interrupted"
RECOVERED = "recovered"


async def recover_interrupted(calls: ToolCalls, state: ThreadState) -> bool:
    """Settle every interrupted turn of ``state``'s thread (the caller holds the thread's turn); whether
    there was one (the thread's record changed)."""
    interrupted = await asyncio.to_thread(calls.threads.turns_with_status, state.thread_id, INTERRUPTED)
    for record in interrupted:
        await _recover(calls, state.thread_id, record.turn)
    return bool(interrupted)


async def _recover(calls: ToolCalls, thread_id: str, turn: int) -> None:
    threads = calls.threads
    steps = await asyncio.to_thread(threads.steps, thread_id, turn)
    answered = {s.call_id for s in steps if s.call_id and s.status == "finished"}
    next_index = max((s.index for s in steps), default=-1) + 1
    settled: list[str] = []
    for step in steps:
        if step.kind == "tool" and step.status == "started":
            payload = await _outcome(calls, thread_id, turn, step)
            await asyncio.to_thread(_finish, calls, step, payload, step.index)
            settled.append(f"{step.tool}: {payload['status']}")
            if step.call_id:
                answered.add(step.call_id)
    for step in steps:
        for call in ((step.args or {}).get("tool_calls") or []) if step.kind == "model" else []:
            if not call.get("id") or call["id"] in answered:
                continue
            payload = {
                "status": ToolOutcome.SKIPPED.value,
                "message": "not run: the turn was interrupted first",
            }
            ghost = StepRecord(
                thread_id=thread_id, turn=turn, index=next_index, kind="tool", tool=str(call.get("name")),
                args=call.get("arguments") or {}, call_id=call["id"],
            )  # fmt: skip
            await asyncio.to_thread(_finish, calls, ghost, payload, next_index, str(call.get("name")))
            answered.add(call["id"])
            next_index += 1
    summary = "; ".join(settled) or "nothing was running"
    final = f"interrupted and recovered ({summary})"
    await asyncio.to_thread(threads.end_turn, thread_id, turn, RECOVERED, final)


async def _outcome(calls: ToolCalls, thread_id: str, turn: int, step: StepRecord) -> dict[str, Any]:
    executor = calls.executor
    if step.tool == DELEGATE:
        return await _delegation(calls, thread_id, turn, step)
    if step.tool == SKILL_RUN:
        run = await asyncio.to_thread(executor.runtime.runs.get, run_id_for(step.step_id))
        if run is not None:  # the flow had started: it goes on as a run of its own
            return {
                "task_id": SKILL_RUN, "execution_id": "", "status": ToolOutcome.RUNNING.value,
                "message": f"its run {run.run_id} had started ({run.status}): tether flow show {run.run_id}",
                "data": {"run_id": run.run_id, "run_status": run.status},
            }  # fmt: skip
    if step.execution_id is None:
        return {"status": ToolOutcome.SKIPPED.value, "message": "not run: the turn was interrupted first"}
    record = await asyncio.to_thread(executor.store.get, step.execution_id)
    if record is None:
        return {
            "status": ToolOutcome.SKIPPED.value,
            "message": "not run: the turn was interrupted before it started",
            "execution_id": step.execution_id,
        }
    if not executor.runtime.installation.owns(record.installation):
        # Another home's job (a database shared by several homes): its outcome is known there, and it
        # is never re-run or waited for here. (Another node of this installation's is followed below:
        # its node settles it, and a lost node's is settled as unknown.)
        return {
            "task_id": record.task_id,
            "execution_id": record.execution_id,
            "status": ToolOutcome.UNKNOWN.value,
            "message": (
                f"it ran on host {record.host or 'unknown'} (another tether home on this database): its "
                "outcome is known there"
            ),
            "data": {"elsewhere": {"installation": record.installation, "host": record.host}},
        }
    record = await asyncio.to_thread(executor.jobs.reconcile, step.execution_id)
    described = await asyncio.to_thread(executor.jobs.describe, record)
    if never_began(described):  # its process died after putting it on record, before its worker began
        again = await calls.once(
            record.task_id, record.params, thread_id=thread_id, turn=turn, index=step.index, consent=None,
            execution_id=record.execution_id, attached=described,
        )  # fmt: skip
        return again.model_dump(mode="json")
    if not (record.terminal and record.status is TaskStatus.FAILED and record.data.get("interrupted")):
        return described.model_dump(mode="json")  # adopted, or live and going on
    spec = executor.registry.get(record.task_id, calls.caller, calls.grants)
    if spec is not None and spec.idempotent and spec.danger is Danger.SAFE:
        again = await executor.execute(
            record.task_id,
            record.params,
            caller=calls.caller,
            grants=calls.grants,
            origin=calls.origin(thread_id),
            step_id=step.step_id,
            execution_id=again_id(thread_id, turn, step.index),
        )
        return again.with_data(rerun_of=step.execution_id).model_dump(mode="json")
    return {
        "task_id": record.task_id,
        "execution_id": record.execution_id,
        "status": ToolOutcome.UNKNOWN.value,
        "message": (
            f"its worker died mid-run: {record.task_id} may or may not have taken effect; it was not run "
            "again because it is not an idempotent, safe task — check the state of the world first"
        ),
        "data": {"interrupted": True},
    }


async def _delegation(calls: ToolCalls, thread_id: str, turn: int, step: StepRecord) -> dict[str, Any]:
    """A delegation cut by the crash: its child thread says what the sub-agent did. Its own interrupted
    turn is settled first (its jobs looked up like any), then its calls are reported: a sub-agent that
    used a tool may have acted, so the delegation is ``unknown`` with what ran, never "not run"."""
    child = child_thread(thread_id, turn, step.index)
    threads = calls.threads
    await asyncio.to_thread(threads.interrupt_orphans, _alive, (), child)
    state = await asyncio.to_thread(threads.load, child)
    if state is None or not state.turns:
        return {"status": ToolOutcome.SKIPPED.value, "message": "not run: the turn was interrupted first"}
    await recover_interrupted(calls, state)
    ran = [
        {"task_id": s.tool, "status": str((s.result or {}).get("status", "started"))}
        for s in await asyncio.to_thread(threads.steps, child)
        if s.kind == "tool" and s.tool and (s.result or {}).get("status") != ToolOutcome.SKIPPED.value
    ]
    if not ran:
        return {
            "task_id": DELEGATE, "execution_id": "", "status": ToolOutcome.SKIPPED.value,
            "message": f"not run: the delegated turn (thread {child}) was interrupted before it used a tool",
            "data": {"thread_id": child, "tools": []},
        }  # fmt: skip
    listed = ", ".join(f"{r['task_id']} ({r['status']})" for r in ran)
    return {
        "task_id": DELEGATE, "execution_id": "", "status": ToolOutcome.UNKNOWN.value,
        "message": (
            f"the delegation was interrupted: in thread {child} the sub-agent had used {listed}; it may "
            "have acted — check before asking again"
        ),
        "data": {"thread_id": child, "tools": ran},
    }  # fmt: skip


def _alive(pid: int, create_time: float) -> bool:
    return process.is_alive(process.ProcessRef(pid=pid, create_time=create_time))


def _finish(
    calls: ToolCalls,
    step: StepRecord,
    payload: dict[str, Any],
    index: int,
    name: str | None = None,
) -> None:
    tool_name = name or calls.surface.tool_name(step.tool or "")
    message = {
        "role": "tool",
        "tool_call_id": step.call_id or f"recovered_{index}",
        "name": tool_name,
        "content": json.dumps(payload, ensure_ascii=False),
    }
    finished = StepRecord(
        thread_id=step.thread_id, turn=step.turn, index=index, kind="tool", tool=step.tool, args=step.args,
        result=payload, text="settled after the turn was interrupted", execution_id=step.execution_id,
        call_id=step.call_id,
    )  # fmt: skip
    event = ToolFinished(
        topic=f"thread:{step.thread_id}", thread_id=step.thread_id, turn=step.turn, index=index,
        tool=step.tool or "", args=step.args or {}, result=payload,
    )  # fmt: skip
    calls.threads.record_step(finished, event, message)
