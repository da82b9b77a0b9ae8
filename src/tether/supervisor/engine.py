"""The engine: a run is a chain of DBOS workflow segments that drive its plan to the end.

A segment (workflow id ``<run>.<n>``) begins, for a goal's run with no tasks yet, with the ``plan``
step; then it loops: one ``advance`` step reads what changed in the run, applies ``policies.schedule``
(skips, review requests, the end) and takes the next wave. A wave of inline calls runs inside that step
(each attempt on record with its job's claim, and settled with its job's end), which decides again;
any other wave's attempts go on record as started and the wave is returned, its tasks run in parallel —
a call is one ``attempt`` step, an agent's task a child workflow (``agent_attempt``) whose model calls
and tool executions are steps of their own. Decisions are
checkpointed by DBOS, so a segment replayed after a crash takes the same path; an attempt that was in
flight is executed again under the **same execution id** (derived from run, task and attempt), which the
executor resolves: the published result is adopted, a live worker is re-attached, a worker that died
mid-run is an explicit ``unknown`` that the task's failure policy settles. Nothing runs twice silently.

A segment ends when the run is over, when a person must answer (the pending review is in the store;
no worker, lock, thread or parked workflow is held), or when a retry is due later (the next segment is
enqueued with a durable delay). A person's answer enqueues the next segment, deduplicated by its
workflow id, from any process — an executor need not be running.

Only executor processes import this module (it registers the workflows with DBOS).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from dbos import DBOS, SetWorkflowID

import tether.telemetry as telemetry
from tether.execution.admission import execution_id_for
from tether.execution.executor import MAINTAIN_EVERY_S, Executor
from tether.runtime import Runtime
from tether.store.runs import RunRecord
from tether.supervisor import cluster, durable, idle, notify, turns
from tether.supervisor.attempts import deadline_of, finish, inline_attempt, perform
from tether.supervisor.eager import Ahead, Ended
from tether.supervisor.host import Host, NotAnExecutor, current, epoch, host, install, io
from tether.supervisor.plan import Profile
from tether.supervisor.policies import (
    context_of,
    executor_of,
    schedule,
)
from tether.supervisor.reading import (
    Known,
    Opened,
    apply_move,
    forget,
    how,
    open_attempt,
    plan_of,
    read_for_attempt,
    read_for_decide,
)

log = logging.getLogger("tether.supervisor")

WORKFLOW = durable.WORKFLOW
PLAN = "plan"  # what ``advance`` says of a run with no tasks yet: the segment plans it first
segment_id = durable.segment_id


# -- the workflow -----------------------------------------------------------------------------------


@DBOS.workflow(name=WORKFLOW)
async def run_segment(run_id: str, segment: int) -> str:
    try:
        planned = False
        while True:
            decision = await advance(run_id, segment, not planned)
            if decision["end"] == PLAN:  # a goal's run with no tasks yet: planned first, in a step of its own
                planned = True
                if (await plan_run(run_id))["end"]:
                    return "failed"
                continue
            if decision["end"] == "later":
                await continue_later(run_id, segment, decision["delay_s"])
                return "later"
            if decision["end"]:
                if decision["end"] in ("completed", "failed", "cancelled"):
                    await _trace_run(run_id, str(decision["end"]))
                return str(decision["end"])
            await asyncio.gather(
                *(_traced(run_id, item, _attempt_of(run_id, item)) for item in decision["run"])
            )
    except Exception as exc:  # a bug or a broken store: the run must not stay "running"
        if type(exc).__name__ in ("DBOSWorkflowCancelledError", "DBOSAwaitedWorkflowCancelledError"):
            raise
        if (
            current() is None
            or isinstance(exc, NotAnExecutor)
            or (isinstance(exc, RuntimeError) and "after shutdown" in str(exc))
        ):
            raise  # this executor is starting or shutting down: the segment is recovered, never given up
        await give_up(run_id, f"{type(exc).__name__}: {exc}"[:1000])
        raise


def _run_ids(run_id: str) -> tuple[str, str]:
    """A run's trace and the id of its span: derived from the run, the same in every segment and
    process (``tether/telemetry.py``), so a recovered segment's spans join the run's one tree."""
    return telemetry.ids_for(f"run:{run_id}")


async def _traced(
    run_id: str, item: list[Any], attempt: Coroutine[Any, Any, dict[str, Any]]
) -> dict[str, Any]:
    """An attempt under its ``flow_task`` span (a child of the run's span; a call's worker and an
    agent's turn hang under it)."""
    if not telemetry.enabled():
        return await attempt
    trace_id, run_span = _run_ids(run_id)
    task_id, number = str(item[0]), int(item[1])
    ids = {
        "trace_id": trace_id,
        "span_id": telemetry.ids_for(f"run:{run_id}:{task_id}:{number}")[1],
        "parent_id": run_span,
    }
    attributes = {"tether.run.id": run_id, "tether.task.id": task_id, "tether.attempt": number,
                  "tether.executor": str(item[2]) if len(item) > 2 else None}  # fmt: skip
    with telemetry.span(f"flow_task {task_id}", attributes, ids=ids) as traced:
        outcome = await attempt
        status = outcome.get("status") if isinstance(outcome, dict) else None
        traced.set_attribute("tether.task.status", status if isinstance(status, str) else None)
        return outcome


async def _trace_run(run_id: str, end: str) -> None:
    """The run's span, sent once the run ends (from its start: its tasks' spans, sent as they ended,
    hang under its id)."""
    if not telemetry.enabled():
        return
    run = await io(host().runtime.runs.view, run_id, task_ids=[])
    if run is None:
        return
    trace_id, span_id = _run_ids(run_id)
    started = int(epoch(run.created_at) * 1e9)
    attributes = {
        "gen_ai.operation.name": "invoke_workflow", "tether.run.id": run_id, "tether.run.status": end,
        "tether.run.goal": run.goal[:500] or None,
    }  # fmt: skip
    ids = {"trace_id": trace_id, "span_id": span_id}
    with telemetry.span(f"invoke_workflow {run_id}", attributes, ids=ids, start_ns=started) as traced:
        if end != "completed":
            traced.error(run.message or end)


async def _attempt_of(run_id: str, item: list[Any]) -> dict[str, Any]:
    """One attempt of the wave: a step for a call, a child workflow (its id the attempt's execution id)
    for an agent. Either is one operation of the segment, started in the wave's order, so a replayed
    segment meets its recorded operations in the same order."""
    task_id, number = str(item[0]), int(item[1])
    if len(item) > 2 and item[2] == "agent":
        with SetWorkflowID(execution_id_for("run", run_id, task_id, str(number))):
            return await agent_attempt(run_id, task_id, number)
    return await attempt(run_id, task_id, number)


@DBOS.step(name="tether.advance", retries_allowed=False)
async def advance(run_id: str, segment: int, may_plan: bool = True) -> dict[str, Any]:
    """Decide; while the wave is of inline calls only, run it here and decide again: the next wave with
    any other task in it (a worker's call, an agent's turn) is returned for the segment to run as steps
    of their own, as is the run's end.

    An inline call needs no step of its own: its attempt and its job are on tether's record before its
    handler runs, under the execution id derived from run, task and attempt. A crash here re-runs this
    step, whose decision finds the attempt still ``running`` and runs it again under the same id, which
    the executor resolves as it resolves a replayed ``attempt`` step: the recorded outcome is adopted, an
    outcome that died with its process is ``unknown``. So a run of many inline tasks costs one DBOS step
    for all of them instead of two for each. A run with no tasks yet (a goal's) ends it with ``PLAN``
    (once, ``may_plan``): the segment plans it, and a run created with its tasks takes no step for that."""
    h = host()
    while True:
        decision, inline = await _decide(h, run_id, segment, may_plan)
        if decision["end"] is not None or inline is None:
            return decision
        wave = [(o, n, manner, None) for o, n, manner in inline]
        while wave:  # an attempt's end may have claimed the next call (``eager.py``): run it, undecided
            alone = len(wave) == 1  # only then is the run it holds the run on record
            done = await asyncio.gather(
                *(
                    _traced(run_id, [o.task.id, n, "call"], inline_attempt(h, o, n, manner, ahead, alone))
                    for o, n, manner, ahead in wave
                )
            )
            aheads = [a for a in (d.get("ahead") for d in done) if a is not None]
            for end in (a for a in aheads if isinstance(a, Ended)):  # on record with its last task's end
                forget(run_id)
                return {"end": end.status, "run": [], "delay_s": 0.0}
            wave = [(a.opened, a.number, a.how, a) for a in aheads if isinstance(a, Ahead)]


async def _decide(
    h: Host, run_id: str, segment: int, may_plan: bool
) -> tuple[dict[str, Any], list[Any] | None]:
    """The next decision, and the wave's attempts opened for ``advance`` when every one of them is an
    inline call (an empty list: moves were made, decide again; None: the segment takes the decision,
    its wave's attempts on record as started, together: one write for the wave)."""
    decision, known, run = await _decision(h, run_id, segment, may_plan)
    if decision["end"] is not None or known is None or run is None:
        return decision, None
    if not decision["run"]:
        return decision, []
    plan, states = known.plan, {t.task_id: t for t in run.tasks}
    wave = []
    for item in decision["run"]:
        task, number = known.tasks[str(item[0])], int(item[1])
        eid = execution_id_for("run", run_id, task.id, str(number))
        wave.append((task.id, number, eid, how(task, states[task.id], plan.caller)))
    calls = [known.tasks[t].call for t, *_ in wave]
    if not all(c is not None and h.executor.inline(c.task, plan.caller, plan.grants_of()) for c in calls):
        await io(h.runtime.runs.begin_attempts, run_id, wave)
        return decision, None
    opened = [
        (Opened(known, run, known.tasks[t], replace(states[t], status="running", attempts=n), eid), n, manner)
        for t, n, eid, manner in wave
    ]
    return decision, opened


async def _decision(
    h: Host, run_id: str, segment: int, may_plan: bool
) -> tuple[dict[str, Any], Known | None, RunRecord | None]:
    store = h.runtime.runs
    run: RunRecord | None = await io(read_for_decide, h, run_id)
    if run is None:
        return {"end": "missing", "run": []}, None, None
    if run.segment != segment:
        return {"end": "superseded", "run": []}, None, None
    if run.status in ("completed", "failed", "cancelled"):
        return {"end": run.status, "run": []}, None, None
    if may_plan and not run.tasks and run.status == "running":
        return {"end": PLAN, "run": []}, None, None
    known = await io(plan_of, h, run)
    plan, resources = known.plan, known.resources
    claimed = sorted({r for rs in resources.values() for r in rs})
    heads = await io(store.first_waiters, claimed) if claimed else {}
    decision = schedule(
        plan, run, now=time.time(), started=epoch(run.created_at), resources=resources, first_waiters=heads
    )
    for move in decision.moves:
        await io(apply_move, store, run_id, move)
    if decision.moves:
        return {"end": None, "run": []}, known, run  # decide again on the new state
    if decision.end in ("completed", "failed"):
        await io(store.set_status, run_id, decision.end, decision.message)
    elif decision.end == "waiting_for_human":
        await io(store.set_status, run_id, "waiting_for_human", decision.message, only_from=("running",))
    return (
        {
            "end": decision.end,
            "run": [[t, n, "call" if known.tasks[t].call is not None else "agent"] for t, n in decision.run],
            "delay_s": decision.delay_s,
        },
        known,
        run,
    )


@DBOS.step(name="tether.plan", retries_allowed=False)
async def plan_run(run_id: str) -> dict[str, Any]:
    """A goal's run starts with no tasks: its planner (the model's call, or the offline planner) makes
    them here, in a step of its own, so a replay never asks the model again."""
    from tether.errors import ModelError, PlanError
    from tether.supervisor.planner import plan_goal

    h = host()
    head = await io(h.runtime.runs.view, run_id, task_ids=[])
    if head is None or head.status != "running":
        return {"end": None}  # the decision says what becomes of it
    document, _ = await io(h.runtime.runs.plan, run_id)
    if document.get("tasks"):
        return {"end": None}
    goal, caller = str(document.get("goal", "")), str(document.get("caller") or "agent")
    why = "this executor has no model configured to plan goals"
    if h.model_for is not None:
        spent: list[dict[str, Any]] = []
        plan, note = None, ""
        try:
            plan, note = await plan_goal(
                goal, h.executor.registry, h.model_for(None), caller=caller, home=h.runtime.home,
                spent=spent,
            )  # fmt: skip
        except PlanError as exc:
            why = f"the goal cannot be planned: {exc.message}"
        except ModelError as exc:
            why = f"the model service failed while planning: {exc.message}"
        if spent:  # what planning cost, whether or not a plan came of it
            await io(h.runtime.runs.set_planning, run_id, spent)
        if plan is not None:
            done = plan.model_dump(mode="json", exclude_defaults=True)
            ids = [t.id for t in plan.tasks]
            await io(h.runtime.runs.add_tasks, run_id, done, ids, why=note or "planned")
            return {"end": None}
    await io(h.runtime.runs.set_status, run_id, "failed", why[:2000])
    return {"end": "failed"}


@DBOS.step(name="tether.continue_later", retries_allowed=False)
async def continue_later(run_id: str, segment: int, delay_s: float) -> None:
    h = host()
    following = await io(h.runtime.runs.next_segment, run_id, expect=segment) or segment + 1
    await io(durable.enqueue_segment, h.runtime, run_id, following, delay_s)


@DBOS.step(name="tether.give_up", retries_allowed=False)
async def give_up(run_id: str, message: str) -> None:
    await io(host().runtime.runs.set_status, run_id, "failed", f"the engine failed: {message}")


# -- one attempt ------------------------------------------------------------------------------------


@DBOS.step(name="tether.attempt", retries_allowed=False)
async def attempt(run_id: str, task_id: str, number: int) -> dict[str, Any]:
    """One attempt of a task that calls a registry task: one step, one execution."""
    h = host()
    at = await io(open_attempt, h, run_id, task_id, number)
    if isinstance(at, dict):
        return at
    started = time.monotonic()
    outcome, message, data = await perform(
        h, at.known.plan, at.run, at.task, at.state, at.execution_id, number
    )
    return await finish(
        h, at.known, at.run, task_id, number, outcome, message, data, time.monotonic() - started
    )


@DBOS.workflow(name="tether.agent_attempt")
async def agent_attempt(run_id: str, task_id: str, number: int) -> dict[str, Any]:
    """One attempt of a task for an executor profile: a conversation turn of its own, whose model calls
    and tool executions are steps of this workflow (``supervisor/turns.py``). A crash mid-turn resumes
    the turn from its last finished step: no model call is asked twice, no tool runs twice."""
    opened = await open_agent(run_id, task_id, number)
    if "outcome" in opened:  # refused before any turn (no model): settled like any outcome
        return await finish_agent(run_id, task_id, number, opened["started"], opened["outcome"])
    if "ask" not in opened:
        return opened  # nothing to run: its outcome is on record, or the run was cancelled
    outcome = await turns.agent_turn(host(), opened)
    return await finish_agent(run_id, task_id, number, opened["started"], outcome)


@DBOS.step(name="tether.open_agent", retries_allowed=False)
async def open_agent(run_id: str, task_id: str, number: int) -> dict[str, Any]:
    h = host()
    at = await io(open_attempt, h, run_id, task_id, number)
    if isinstance(at, dict):
        return at
    plan, run, task, state = at.known.plan, at.run, at.task, at.state
    name = executor_of(task, state, plan.caller)
    profile = plan.profiles.get(name) or Profile(caller=name)
    if h.model_for is None:
        return {"outcome": ["rejected", "this executor has no model configured for agent tasks", {}],
                "started": time.time()}  # fmt: skip
    description = state.overrides.get("description", task.description)
    context = context_of(plan, run)
    given = {k: context[k] for k in task.inputs if k in context}
    message = description if not given else f"{description}\n\n{json.dumps(given, ensure_ascii=False)[:8000]}"
    return {
        "ask": message,
        "thread_id": f"run-{at.execution_id}",
        "caller": profile.caller,
        "agent": profile.agent,
        "grants": plan.grants,  # the run's grants narrow its agent tasks too
        "chain": plan.chain,  # … and its agents stand one hop below the agent that started it
        "model": profile.model,
        "persona": profile.system_prompt,
        "deadline": deadline_of(plan, run, task),
        "started": time.time(),
    }


@DBOS.step(name="tether.finish_agent", retries_allowed=False)
async def finish_agent(
    run_id: str, task_id: str, number: int, started: float, outcome: list[Any]
) -> dict[str, Any]:
    h = host()
    known, run = await io(read_for_attempt, h, run_id, task_id)
    status, message, data = outcome
    return await finish(h, known, run, task_id, number, status, message, data, time.time() - started)


# -- calls forwarded to the holder of their resource ---------------------------------------------------


@DBOS.workflow(name=durable.REMOTE_CALL_WORKFLOW)
async def remote_call(call: dict[str, Any]) -> dict[str, Any]:
    """A call another node forwarded here, because this executor holds its resource (``cluster.py``)."""
    return await remote_step(call)


@DBOS.step(name="tether.remote_step", retries_allowed=False)
async def remote_step(call: dict[str, Any]) -> dict[str, Any]:
    result = await cluster.run_forwarded(host().executor, call)
    return result.model_dump(mode="json")


# -- schedules --------------------------------------------------------------------------------------


@DBOS.workflow(name=durable.SCHEDULE_WORKFLOW)
async def schedule_fire(scheduled_at: Any, context: Any) -> dict[str, Any]:
    """One tick of a schedule (``schedules.py``): its workflow id — the schedule and the tick's time —
    keys the signal, so the tick is decided, and its message posted, once."""
    return await schedule_act(
        str(DBOS.workflow_id), str(scheduled_at), context if isinstance(context, dict) else {}
    )


@DBOS.step(name="tether.schedule_act", retries_allowed=False)
async def schedule_act(workflow_id: str, at: str, context: dict[str, Any]) -> dict[str, Any]:
    from tether.agent.decider import Signal
    from tether.supervisor.initiative import consider, decider_model

    h = host()
    signal = Signal(
        kind="schedule", agent=str(context.get("agent") or "assistant"), text=str(context.get("text", "")),
        source=f"schedule {context.get('name', '')}".strip(), key=workflow_id,
        data={"action": context.get("action", ""), "schedule": context.get("name", ""), "at": at},
    )  # fmt: skip
    record = await consider(
        h.runtime, signal, model=await io(decider_model, h.runtime, h.model_for, signal.agent)
    )
    return {"decision": record.decision_id, "fired": record.fired, "thread_id": record.thread_id}


# -- launching an executor ----------------------------------------------------------------------------


async def launch(
    runtime: Runtime,
    executor: Executor,
    *,
    model_for: Callable[[str | None], Any] | None = None,
    resources: tuple[str, ...] = (),
) -> Host:
    """Make this process a tether executor: hold a slot, join the installation's registry (owning
    ``resources``), launch DBOS in the running loop, recover what dead executors left. Call
    ``shutdown`` before the loop ends."""
    own = durable.names(runtime.installation.id)
    url = durable.system_url(runtime)
    await io(durable.prepare, url, own, runtime.cluster_settings.concurrency)  # round trips: off the loop
    await io(durable.prepare_resources, url, own, resources)
    slot = await io(durable.take_slot, runtime.home, runtime.installation.host)
    member = cluster.Member(runtime, executor, slot.executor_id, resources, own.version)
    try:
        await io(member.join)
    except BaseException:
        slot.close()
        raise
    # Beats (and the fence's watchdog) from now on: what follows may take longer than a lease.
    beat = asyncio.get_running_loop().create_task(member.run())
    executor.placement.forwarder = cluster.DbosForwarder(runtime, keep_on_cancel=member.quitting)
    executor.placement.holds = member.may_take
    # This node's jobs an earlier executor left: re-attached if their workers live, settled otherwise
    # (another node's executor cannot tell from afar, and waits for this node's word).
    await io(executor.jobs.recover)
    # The host is in place before DBOS launches: its queue and its own recovery may start a segment at
    # once, and a segment that found no host failed its run ("not a tether executor") under load.
    telemetry.configure(runtime.home)  # as [telemetry] says (nothing, by default)
    made = Host(runtime=runtime, executor=executor, model_for=model_for, slot=slot, member=member, beat=beat)
    install(made)
    try:
        DBOS(config=durable.config(runtime, slot))  # type: ignore[arg-type]
        # Only the installation's queue and the queues of what this executor owns: another resource's
        # work is its holder's.
        DBOS.listen_queues([own.queue, *(durable.resource_queue(own, r) for r in member.resources)])
        DBOS.launch()
        durable.ping_idle_connections()
        sys_db = durable.instance()._sys_db
        made.quiet = [idle.quiet_when_idle(sys_db, own.queue, member.taking)]
        for resource in member.resources:
            allowed = functools.partial(member.may_take, resource)
            made.quiet.append(idle.quiet_when_idle(sys_db, durable.resource_queue(own, resource), allowed))
        await io(durable.recover_free_slots, runtime.home, slot)
    except BaseException:
        install(None)
        beat.cancel()
        await io(member.leave)
        slot.close()
        raise
    member.launched = True
    await io(reconcile_runs, runtime)
    await io(durable.prune, runtime)
    made.watch = asyncio.get_running_loop().create_task(_watch_slots(runtime, slot, executor))
    made.notify = asyncio.get_running_loop().create_task(notify.loop(runtime, model_for))
    return made


# How often a live executor looks for the slots of executors that died after it launched: what they held
# is handed back to the queue within this long (a launch only recovered the slots dead at that moment).
WATCH_SLOTS_S = 2.0


# How often a long-lived executor applies the retention of ``[store]``, as a command does when it opens
# the home (an executor did only when it launched, so one running for months kept everything).
PRUNE_EVERY_S = MAINTAIN_EVERY_S


async def _watch_slots(runtime: Runtime, slot: durable.Slot, executor: Executor) -> None:
    """Dead executors' work handed on, every ``WATCH_SLOTS_S``; and the home's retention when due."""
    while True:
        await asyncio.sleep(WATCH_SLOTS_S)
        try:
            if await io(executor.prune_if_due, every_s=PRUNE_EVERY_S):
                await io(durable.prune, runtime)
        except Exception:  # retention waits for the next pass; the executor goes on
            log.warning("applying the retention settings failed", exc_info=True)
        try:
            recovered = await io(durable.recover_free_slots, runtime.home, slot)
        except Exception:  # a store or DBOS hiccup: the next look may do better
            log.warning("looking for dead executors' work failed", exc_info=True)
            continue
        if recovered:
            log.warning("took over %d workflow(s) of executors of %s that died", recovered, runtime.home)


async def held_here() -> list[str]:
    """The workflows this executor has dequeued and not finished (other runs' segments and turns as
    well as its own): ``shutdown`` abandons them, so whoever leaves early hands them on first."""
    made = current()
    if made is None or made.slot is None:
        return []
    found = await DBOS.list_workflows_async(
        status="PENDING", executor_id=made.slot.executor_id, load_input=False, load_output=False
    )
    return [w.workflow_id for w in found]


def shutdown() -> None:
    made = current()
    if made is not None and made.member is not None:
        made.member.quiet()  # no fence while DBOS winds down: this is a stop, not a silence
    for task in (made.watch, made.notify, made.beat) if made is not None else ():
        if task is not None:
            task.cancel()
    DBOS.destroy(workflow_completion_timeout_sec=0)
    if made is not None and made.member is not None:
        made.member.leave()  # its holds go at once: a standby takes its resources without waiting a lease
    for quiet in (made.quiet or []) if made is not None else ():
        quiet.close()
    if made is not None and made.slot is not None:
        made.slot.close()
    install(None)


def reconcile_runs(runtime: Runtime) -> int:
    """This home's runs that are ``running`` with no live segment (a crash between recording a run, or a
    person's answer, and enqueuing what goes on; a segment DBOS gave up on) get their next segment.
    Another home's run is never continued here: its segments are in its own application, out of sight
    of this one, and its work belongs to its own executors."""
    count = 0
    for run in runtime.runs.active():
        if run.status != "running":
            continue
        if durable.segment_status(runtime, run.run_id, run.segment) in durable.NO_LIVE_SEGMENT:
            durable.continue_run(runtime, run.run_id, run.segment)
            count += 1
    return count
