"""A person's conversations, managed from outside a turn: what ``tether serve`` and the thread commands
of the CLI share.

- ``submit`` hands a message, or the answer to the question a thread waits on, to the home's executors
  as a durable turn (``tether.turn``, see ``turns.py``) and returns at once with the turn's request id;
  one turn per thread at a time, so a second message while one is under way is refused, not queued.
- ``cancel_turn`` is Ctrl-C for a turn handed over to an executor (the page's Cancel): its workflow is
  cancelled, the turn ends at once (``interrupted``, so the next turn settles what it left, and every call
  the model made gets an answer), and the job it was waiting on is stopped through the executor's control
  entry point as the caller who asked. A background job it had already handed off goes on (stop it as a
  job), as with Ctrl-C in ``tether chat``.
- ``delete_thread`` makes a thread converge to gone: its turn's workflow is cancelled, its jobs are
  stopped through the executor's control entry point (as the person who asked), and once its turn has
  ended its records are removed.
- ``settle_orphans`` runs when an executor starts serving people: turns a crash left ``running`` become
  ``interrupted`` (unless a durable workflow will resume them), so no page waits on them forever; the
  next turn on the thread settles their tool steps (``agent/recovery.py``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError
from tether.events import TurnFinished
from tether.execution import process
from tether.store.artifact_files import forget_thread, remove_unfinished
from tether.store.threads import ThreadDeleted, ThreadState
from tether.supervisor import durable
from tether.tasks.result import TaskStatus

if TYPE_CHECKING:
    from tether.runtime import Runtime

LIVE = ["PENDING", "ENQUEUED"]
ATTEMPT_WORKFLOW = "tether.agent_attempt"
SETTLE_TIMEOUT_S = 10.0
IN_FLIGHT_S = 3.0  # how long a cancel waits for the job of a call that began as its turn ended
INTERRUPTED = "interrupted"
FINISHING_S = 3.0  # how long a new turn waits for the previous turn's workflow to finish returning
AGENT_THREAD = "run-"  # an agent task's thread in a goal run (run-<execution id>): the run's, not a person's


def new_thread_id() -> str:
    """The id of a person's new thread (never one of ``AGENT_THREAD``'s)."""
    return f"th-{secrets.token_hex(4)}"


Busy = durable.TurnBusy  # the thread is in a turn already


def request_id() -> str:
    return f"turn-{secrets.token_hex(8)}"


def live_turns(client: Any, thread_id: str | None = None) -> list[tuple[str, str]]:
    """(workflow id, thread id) of every handed-over turn not yet ended (of one thread if given)."""
    found = []
    for status in client.list_workflows(name=durable.TURN_WORKFLOW, status=LIVE, load_output=False):
        args = (status.input or {}).get("args") or [{}]
        thread = str(args[0].get("thread_id", "")) if isinstance(args[0], dict) else ""
        if thread_id is None or thread == thread_id:
            found.append((status.workflow_id, thread))
    return found


def question(runtime: Runtime, state: ThreadState) -> dict[str, Any] | None:
    """The call ``state``'s thread waits on a person for, as the page and ``tether approvals`` show it;
    None when nothing waits, or on a goal run's agent thread (its run settles that question)."""
    pending = state.pending
    if not pending or state.thread_id.startswith(AGENT_THREAD) or state.parent:
        return None  # (a delegated thread's question is asked in the thread that delegated)
    turn = runtime.threads.turn(state.thread_id, state.turns)
    return {
        "thread_id": state.thread_id,
        "pending_id": str(pending.get("id", "")),
        "tool": str(pending.get("tool", "")),
        "args": dict(pending.get("args") or {}),
        "danger": pending.get("danger"),
        "question": turn.final if turn is not None else "",
    }


def questions(runtime: Runtime, limit: int = 200) -> list[dict[str, Any]]:
    """Every waiting question among the ``limit`` most recently changed threads."""
    return [
        q for state in runtime.threads.threads(limit=limit) if (q := question(runtime, state)) is not None
    ]


def running(runtime: Runtime, thread_id: str) -> bool:
    return bool(runtime.threads.turns_with_status(thread_id, "running"))


def elsewhere(runtime: Runtime, thread_id: str) -> str | None:
    """Where the thread's running turn, or a live job of it, runs when that is another home on the same
    database (whose processes this home can neither see nor stop); None when none does."""
    for turn in runtime.threads.turns_with_status(thread_id, "running"):
        if not runtime.installation.owns(turn.installation):
            return f"host {turn.host or 'unknown'} (tether installation {turn.installation or 'unknown'})"
    for job in runtime.jobs.list(active=True, origin=f"thread:{thread_id}", limit=10_000):
        if not runtime.installation.owns(job.installation):
            return f"host {job.host or 'unknown'} (tether installation {job.installation or 'unknown'})"
    return None


def submit(
    runtime: Runtime,
    client: Any,
    thread_id: str,
    *,
    message: str | None = None,
    approve: bool | None = None,
    pending_id: str | None = None,
    source: str,
    formats: Sequence[str] = (),
    images: Sequence[dict[str, Any]] = (),
) -> str:
    """Hand one turn on ``thread_id`` to the executors: ``message``, or (``approve`` given) the answer to
    the question ``pending_id`` (exactly that call runs, once, or is declined). Its request id."""
    if thread_id.startswith(AGENT_THREAD):
        raise ConfigError(
            f"thread {thread_id!r} is a goal run's agent task: its questions are answered through its run"
        )
    delegated = runtime.threads.load(thread_id)
    if delegated is not None and delegated.parent:
        asker = delegated.parent.rsplit(":", 2)[0]
        raise ConfigError(
            f"thread {thread_id!r} is a delegation asked by thread {asker!r}: talk and answer there"
        )
    if runtime.threads.deleted(thread_id):
        raise ThreadDeleted(f"thread {thread_id!r} was deleted; its id is not used again: start a new thread")
    busy = f"thread {thread_id!r} is in a turn already: wait for it to end, or stop it"
    deadline = time.monotonic() + FINISHING_S
    while running(runtime, thread_id) or live_turns(client, thread_id):
        # A turn that is on record as ended may still have its workflow returning for a moment (the
        # queue releases the thread only then): a person who answers at once is not refused for that.
        if running(runtime, thread_id) or time.monotonic() >= deadline:
            raise Busy(busy)
        time.sleep(0.02)
    request: dict[str, Any] = {"thread_id": thread_id, "source": source}
    if approve is None:
        if not (message or "").strip():
            raise ConfigError("say what you want done")
        request["message"] = message
        request["formats"] = list(formats)
        if images:
            request["images"] = list(images)
    else:
        state = runtime.threads.load(thread_id)
        waiting = None if state is None or state.pending is None else str(state.pending.get("id"))
        if waiting is None or (pending_id is not None and waiting != pending_id):
            raise ConfigError(f"thread {thread_id!r} is not waiting for that confirmation")
        request.update(confirm=True, approve=approve, pending_id=waiting, message="")
    workflow_id = request_id()
    deadline = time.monotonic() + FINISHING_S
    while True:
        try:
            durable.enqueue_turn(client, workflow_id, request)
            return workflow_id
        except Busy:
            # The thread's last turn is on record as ended, but its workflow is still returning (the
            # queue releases the thread when it has): a person who answers at once is not refused for it.
            if running(runtime, thread_id) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def _cancel_live(client: Any, thread_id: str) -> list[str]:
    """Cancel the thread's handed-over turns that have not ended (with their children): none of their
    steps starts from now on. Their workflow ids."""
    workflows = [w for w, _ in live_turns(client, thread_id)]
    for workflow_id in workflows:
        client.cancel_workflow(workflow_id, cancel_children=True)
    return workflows


def cancelled_text(message: str) -> str:
    """What a cancelled turn says, in the language of the message that started it."""
    if any("\u4e00" <= ch <= "\u9fff" for ch in message):
        return "本轮已被你取消，其余步骤不再执行。"
    return "You cancelled this turn; nothing more of it runs."


async def cancel_turn(
    runtime: Runtime, executor: Any, client: Any, thread_id: str, *, caller: str
) -> dict[str, Any]:
    """Cancel the thread's running (or queued) turn and stop the job it is waiting on, through
    ``executor.control`` as ``caller``. What was done: the turn cancelled (None when none ran) and the
    jobs stopped; ``cancelled`` is False when there was nothing to cancel."""
    if thread_id.startswith(AGENT_THREAD):
        raise ConfigError(f"thread {thread_id!r} is a goal run's agent task: cancel its run instead")
    threads = runtime.threads
    if await asyncio.to_thread(threads.load, thread_id) is None:
        raise ConfigError(f"no thread {thread_id!r}")
    workflows = await asyncio.to_thread(_cancel_live, client, thread_id)
    turns = await asyncio.to_thread(threads.turns_with_status, thread_id, "running")
    if turns and not workflows and not runtime.installation.owns(turns[-1].installation):
        where = f"{turns[-1].host or 'unknown'} (tether installation {turns[-1].installation or 'unknown'})"
        raise Busy(f"thread {thread_id!r} is in a turn that runs on host {where}: cancel it there")
    if turns and not workflows:  # not handed over: a process that is no executor runs it, or ran it
        await asyncio.to_thread(threads.interrupt_orphans, alive, (), thread_id)
        if await asyncio.to_thread(running, runtime, thread_id):
            raise Busy(
                f"thread {thread_id!r} is in a turn run by another process (tether run --here, tether "
                "chat): stop it there with Ctrl-C"
            )
        turns = []
    if not turns:  # nothing ran; a turn still queued was cancelled before it began
        return {"thread_id": thread_id, "turn": None, "cancelled": bool(workflows), "stopped_jobs": []}
    record = turns[-1]
    # The turn ends now, on record and live: no step of it starts any more (a durable step first makes
    # sure its turn is still running), and `interrupted` lets the next turn settle what it left.
    text = cancelled_text(record.message)
    steps = await asyncio.to_thread(threads.steps, thread_id, record.turn)
    event = TurnFinished(
        topic=f"thread:{thread_id}",
        thread_id=thread_id,
        turn=record.turn,
        index=max((step.index for step in steps), default=-1) + 1,
        status=INTERRUPTED,
        final=text,
    )
    ended = await asyncio.to_thread(threads.end_turn, thread_id, record.turn, INTERRUPTED, text, event)
    stopped = await _stop_in_flight(runtime, executor, thread_id, record.turn, caller=caller)
    return {
        "thread_id": thread_id,
        "turn": record.turn if ended else None,
        "cancelled": ended,
        "stopped_jobs": stopped,
    }


async def _stop_in_flight(
    runtime: Runtime, executor: Any, thread_id: str, turn: int, *, caller: str
) -> list[str]:
    """Stop the jobs of ``turn``'s calls still in flight (a step on record as started). A call that had
    begun when its turn ended may not have its job on record yet: it is waited for, briefly. A
    background job already handed off (running: past its handshake) is the person's, and goes on."""
    origin = f"thread:{thread_id}"
    stopped: list[str] = []
    settled: set[str] = set()
    deadline = time.monotonic() + IN_FLIGHT_S
    while True:
        steps = await asyncio.to_thread(runtime.threads.steps, thread_id, turn)
        waiting = False
        for step in steps:
            eid = step.execution_id
            if step.kind != "tool" or step.status != "started" or not eid or eid in settled:
                continue
            found = await executor.control(eid, "status", caller=caller, origin=origin)
            if found.status is TaskStatus.NOT_FOUND:
                waiting = True  # its worker may be starting this moment
                continue
            settled.add(eid)
            spec = executor.registry.get(found.task_id)
            handed_off = found.status is TaskStatus.RUNNING and spec is not None and spec.background
            if found.status in (TaskStatus.PENDING, TaskStatus.RUNNING) and not handed_off:
                await executor.control(
                    eid, "stop", caller=caller, origin=origin, reason="its turn was cancelled"
                )
                stopped.append(eid)
        if not waiting or time.monotonic() >= deadline:
            return stopped
        await asyncio.sleep(0.05)


async def delete_thread(
    runtime: Runtime, executor: Any, client: Any, thread_id: str, *, caller: str
) -> dict[str, Any]:
    """Cancel the thread's turn, stop its jobs (through ``executor.control`` as ``caller``), then remove
    its records once its turn has ended. What was done."""
    if await asyncio.to_thread(runtime.threads.load, thread_id) is None:
        raise ConfigError(f"no thread {thread_id!r}")
    where = await asyncio.to_thread(elsewhere, runtime, thread_id)
    if where is not None:  # its records would go while that home's turn or job writes on
        raise Busy(f"thread {thread_id!r} has work running on {where}: delete it there, or once that ends")
    workflows = await asyncio.to_thread(_cancel_live, client, thread_id)
    stopped = []
    origin = f"thread:{thread_id}"
    for job in await asyncio.to_thread(executor.jobs_for, caller, origin=origin, active=True, limit=10_000):
        result = await executor.control(
            job.execution_id, "stop", caller=caller, origin=origin, reason="its thread was deleted"
        )
        stopped.append(result.execution_id)
    # A cancelled turn ends at its next step (its session records it failed); wait for that before the
    # records go, so nothing it writes on its way out lands on a deleted thread. A turn whose process
    # died is settled here; one run by another live process without an executor (`tether run --here`)
    # cannot be cancelled from here, so the thread stays.
    deadline = time.monotonic() + (SETTLE_TIMEOUT_S if workflows else 0.0)
    while await asyncio.to_thread(running, runtime, thread_id):
        await asyncio.to_thread(runtime.threads.interrupt_orphans, alive, (), thread_id)
        if not await asyncio.to_thread(running, runtime, thread_id):
            break
        if time.monotonic() >= deadline:
            raise Busy(
                f"thread {thread_id!r} is in a turn run by another process: stop it there (Ctrl-C), then "
                "delete the thread"
            )
        await asyncio.sleep(0.05)
    # Files of jobs it stopped were never finished (a file goes on record only with its job's completion).
    await asyncio.to_thread(remove_unfinished, runtime.home, runtime.artifacts, stopped)
    removed = await asyncio.to_thread(forget_thread, runtime.home, runtime.artifacts, thread_id)
    await asyncio.to_thread(runtime.threads.forget, thread_id)
    await asyncio.to_thread(runtime.memories.forget_thread, thread_id)  # what it said is forgotten too
    return {
        "thread_id": thread_id,
        "cancelled_turns": len(workflows),
        "stopped_jobs": stopped,
        "removed_files": removed,
    }


def alive(pid: int, create_time: float) -> bool:
    return process.is_alive(process.ProcessRef(pid=pid, create_time=create_time))


def settle_orphans(runtime: Runtime, client: Any) -> list[tuple[str, int]]:
    """Mark ``interrupted`` the turns a crash left running that no durable workflow will resume."""
    spare = {thread for _, thread in live_turns(client)}
    for status in client.list_workflows(
        name=ATTEMPT_WORKFLOW, status=LIVE, load_input=False, load_output=False
    ):
        spare.add(f"run-{status.workflow_id}")  # an agent task's turn runs on thread run-<execution id>
    return runtime.threads.interrupt_orphans(alive, spare)
