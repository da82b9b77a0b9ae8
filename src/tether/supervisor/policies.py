"""What the engine does next: pure decisions over a plan and the recorded state of its tasks.

``schedule`` looks at a run and says which tasks to attempt now (a wave: ready tasks, up to the plan's
``max_parallel``, never two that claim a common resource), which to skip (a ``when`` that does not
hold, a dependency that did not succeed), which need a person first (``review: before``), and when the
run is over, paused, or due again later. ``after_attempt`` applies a task's failure policy chain to the
outcome of one attempt: retry at once → retry later with backoff → another executor → a simplified
description → a person (with the diagnostics packed) → failed; a circuit breaker per task and per
executor skips retries on a path that keeps failing, and a loop that reaches its bound escalates.

No I/O here: the engine's steps read the store, call these, and write what they return, so the same
state always gives the same decision (what DBOS's replay needs) and every rule is tested as data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.store.runs import TASK_DONE, TASK_ENDED, RunRecord, TaskState
from tether.supervisor.plan import Plan, Task, When
from tether.tasks.spec import TaskSpec

BREAKER_TASK = 4  # failed attempts of one task before its retries are skipped
BREAKER_EXECUTOR = 6  # failed attempts on one executor (profile or caller) across the run
INTERRUPTIONS = 5  # runs again of an idempotent task whose process died mid-run, before its retries count
FAILED = ("failed", "stopped", "unknown", "rejected", "not_found")
# A resource held by another job is a wait, not a failure: the task tries again after a pause that grows
# to RESOURCE_POLL_MAX_S, in the order the waiting tasks asked, for as long as its ``timeout_s`` (or
# RESOURCE_WAIT_S when it has none), and only then goes to a person.
RESOURCE_POLL_S = 0.5
RESOURCE_POLL_MAX_S = 5.0
RESOURCE_WAIT_S = 1800.0


def busy(outcome: str, data: dict[str, Any]) -> bool:
    """Whether an attempt was refused only because a resource it claims is held (a lock's refusal)."""
    return outcome == "rejected" and bool(data.get("resource")) and ("holder" in data or "blocked_by" in data)


def waiting_for(state: TaskState) -> list[str]:
    """The resources a task waits for (in the queue of those that asked before it), if any."""
    stage = state.overrides.get("stage") or {}
    return [str(r) for r in stage.get("waiting_for") or ()]


@dataclass(frozen=True, slots=True)
class Move:
    """A change of one task's recorded state."""

    task_id: str
    status: str
    message: str = ""
    review: dict[str, Any] | None = None
    overrides: dict[str, Any] | None = None
    iterations: int | None = None
    diagnostics: dict[str, Any] | None = None
    outputs: dict[str, Any] | None = None

    def fields(self) -> dict[str, Any]:
        """The task's recorded fields this move sets (those it leaves as they are are absent)."""
        values: dict[str, Any] = {"status": self.status, "message": self.message}
        for name in ("review", "overrides", "iterations", "diagnostics", "outputs"):
            value = getattr(self, name)
            if value is not None:
                values[name] = value
        return values


@dataclass(slots=True)
class Decision:
    run: list[tuple[str, int]] = field(default_factory=list)  # (task id, attempt number)
    moves: list[Move] = field(default_factory=list)
    end: str | None = None  # completed | failed | waiting_for_human | later | cancelled
    message: str = ""
    delay_s: float = 0.0


def context_of(plan: Plan, run: RunRecord) -> dict[str, Any]:
    """Every context key on record: the plan's seed (``inputs.*``) and the outputs of ended tasks."""
    context: dict[str, Any] = {f"inputs.{k}" if "." not in k else k: v for k, v in plan.context.items()}
    for state in run.tasks:
        context.update(state.outputs)
    return context


MISSING = object()


def lookup(ref: str, context: dict[str, Any]) -> Any:
    """The value ``ref`` names (``data.search/results/0/url``), or ``MISSING``."""
    key, _, path = ref.partition("/")
    value = context.get(key, MISSING)
    for part in path.split("/") if path else ():
        if isinstance(value, dict):
            value = value.get(part, MISSING)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
        if value is MISSING:
            return MISSING
    return value


def call_args(
    task: Task, state: TaskState | None, context: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The arguments a direct call runs with: a person's edit or its ``args``, then ``args_from`` read
    from the context. Also the single references that are missing (the task is skipped then)."""
    assert task.call is not None
    overrides = state.overrides if state is not None else {}
    if "args" in overrides:  # an edit, or the arguments a person approved: exactly those run
        return dict(overrides["args"]), []
    args = dict(task.call.args)
    missing: list[str] = []
    for name, refs in task.call.args_from.items():
        if isinstance(refs, str):
            value = lookup(refs, context)
            if value is MISSING:
                missing.append(refs)
            else:
                args[name] = value
            continue
        values = [v for v in (lookup(ref, context) for ref in refs) if v is not MISSING]
        args[name] = values
    return args, missing


def as_text_where_text(spec: TaskSpec | None, args: dict[str, Any]) -> dict[str, Any]:
    """A list read from several references, for a parameter that takes text: joined with blank lines."""
    if spec is None or spec.params is None:
        return args
    fields = spec.params.model_fields
    out = dict(args)
    for name, value in args.items():
        info = fields.get(name)
        if info is not None and info.annotation is str and isinstance(value, list):
            out[name] = "\n\n".join(str(v) for v in value if v not in (None, ""))
    return out


def holds(when: When, run: RunRecord, context: dict[str, Any]) -> bool:
    state = run.task(when.task)
    if state is None:
        return False
    status = "rejected" if state.status == "rejected" else state.status
    if status not in when.status:
        return False
    return when.key is None or context.get(when.key) == when.equals


def resources_of(task: Task, specs: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    return specs.get(task.call.task, ()) if task.call is not None else ()


def schedule(
    plan: Plan,
    run: RunRecord,
    *,
    now: float,
    started: float,
    resources: dict[str, tuple[str, ...]],
    first_waiters: dict[str, tuple[str, str]] | None = None,
) -> Decision:
    """The next wave of ``run`` (``now`` and ``started`` are epoch seconds; ``resources`` maps a
    registry task to the resources it claims; ``first_waiters`` names, per resource, the task of this
    home's runs that has waited for it longest: another task that needs it waits behind it)."""
    decision = Decision()
    if run.status == "cancelled":
        decision.end = "cancelled"
        return decision
    if plan.timeout_s is not None and now - started > plan.timeout_s:
        decision.end, decision.message = "failed", f"the run timed out after {plan.timeout_s:g} s"
        return decision
    states = {t.task_id: t for t in run.tasks}
    context = context_of(plan, run)
    claimed: set[str] = set()
    waiting = later = 0
    soonest: float | None = None
    for task in plan.tasks:
        state = states.get(task.id)
        if state is None or state.status in TASK_ENDED:
            continue
        if state.status == "waiting_for_human":
            waiting += 1
            continue
        deps = [states.get(d) for d in task.depends_on]
        if any(d is None or d.status not in TASK_ENDED for d in deps):
            continue  # not ready yet
        skip = _skipped_because(task, state, deps, run, context)
        if skip is not None:
            decision.moves.append(Move(task.id, "skipped", f"skipped: {skip}"))
            continue
        due = state.overrides.get("not_before")
        if state.status == "pending" and due is not None and due > now:
            later += 1
            soonest = due if soonest is None else min(soonest, due)
            continue
        if _waits_for_approval(task, state):
            decision.moves.append(
                Move(
                    task.id,
                    "waiting_for_human",
                    "waits for a person's approval before it runs",
                    review=_before(task, state, context),
                )
            )
            continue
        if len(decision.run) >= plan.max_parallel:
            continue
        needs = set(resources_of(task, resources))
        if needs & claimed:
            continue  # the lock would serialize them anyway: run it in a later wave
        ahead = sorted(
            r for r in needs if (first_waiters or {}).get(r, (run.run_id, task.id)) != (run.run_id, task.id)
        )
        if ahead:  # a task that asked for it earlier is waiting: this one queues behind it
            if not waiting_for(state):
                stage = {**(state.overrides.get("stage") or {}), "waiting_since": now, "waiting_for": ahead}
                decision.moves.append(
                    Move(task.id, "pending", f"waits for {', '.join(ahead)}: tasks that asked first go first",
                         overrides={**state.overrides, "stage": stage})
                )  # fmt: skip
                continue
            later += 1
            due = now + RESOURCE_POLL_S
            soonest = due if soonest is None else min(soonest, due)
            continue
        claimed |= needs
        attempt = state.attempts if state.status == "running" else state.attempts + 1
        decision.run.append((task.id, attempt))
    if decision.moves or decision.run:
        return decision
    return _nothing_to_run(plan, run, decision, now=now, waiting=waiting, soonest=soonest if later else None)


def _waits_for_approval(task: Task, state: TaskState) -> bool:
    """A task reviewed before it runs, whose review is not (yet) approved."""
    review = state.review or {}
    approved = review.get("kind") == "before" and review.get("answer") in ("approve", "edit")
    return task.review == "before" and state.status == "pending" and not approved


def _skipped_because(
    task: Task, state: TaskState, deps: list[TaskState | None], run: RunRecord, context: dict[str, Any]
) -> str | None:
    """Why a task whose dependencies ended will never run, or None: its condition does not hold, a
    dependency did not succeed (without a condition), or an argument it reads is not in the context."""
    if task.when is not None:
        if not holds(task.when, run, context):
            return f"its condition on {task.when.task} does not hold"
    else:
        blocked = [d.task_id for d in deps if d is not None and d.status not in TASK_DONE]
        if blocked:
            return f"{', '.join(blocked)} did not succeed"
    if task.call is not None and task.call.args_from:
        _, missing = call_args(task, state, context)
        if missing:
            return f"{', '.join(missing)} is not in the context"
    return None


def _nothing_to_run(
    plan: Plan, run: RunRecord, decision: Decision, *, now: float, waiting: int, soonest: float | None
) -> Decision:
    """How a segment ends when no task can run now: a person is asked, a retry is due later, or the run
    is over (failed when a task failed that no condition handled)."""
    if waiting:
        decision.end, decision.message = "waiting_for_human", f"{waiting} task(s) wait for a person"
        return decision
    if soonest is not None:
        decision.end, decision.delay_s = "later", max(0.0, soonest - now)
        decision.message = f"a retry is due in {decision.delay_s:.0f} s"
        return decision
    states = {t.task_id: t for t in run.tasks}
    handled = {
        t.when.task
        for t in plan.tasks
        if t.when is not None and states.get(t.id, None) is not None and states[t.id].status == "completed"
    }
    bad = [
        s for s in run.tasks if s.status in ("failed", "rejected", "cancelled") and s.task_id not in handled
    ]
    if bad:
        decision.end = "failed"
        decision.message = "; ".join(f"{s.task_id}: {s.message or s.status}" for s in bad)[:2000]
    else:
        decision.end, decision.message = "completed", f"{len(run.tasks)} task(s) done"
    return decision


def outputs_of(task: Task, data: dict[str, Any]) -> dict[str, Any]:
    """The context keys a completed task declared, from its result's data (``data.gold`` ← ``gold``;
    a single declared output with no matching field takes the whole data)."""
    out: dict[str, Any] = {}
    for key in task.outputs:
        name = key.split(".", 1)[1]
        if name in data:
            out[key] = data[name]
        elif len(task.outputs) == 1:
            out[key] = data
    return out


def executor_of(task: Task, state: TaskState, caller: str) -> str:
    return str(state.overrides.get("executor") or task.executor or caller)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stage:
    """One stage of the failure chain, as data: how many times a task may use it (``allowed``), and what
    using it the ``used``-th time says and changes in the task's overrides (``move``)."""

    key: str  # its count in the task's ``stage`` record
    allowed: Callable[[Task], int]
    move: Callable[[Task, int, float, str], tuple[str, dict[str, Any]]]


def _later(task: Task, used: int, now: float, message: str) -> tuple[str, dict[str, Any]]:
    due = now + task.retry.backoff_s * 2 ** (used - 1)
    return f"retry later (in {due - now:.0f} s): {message}", {"not_before": due}


def _for_an_executor(value: object, task: Task) -> int:
    """A stage that changes who runs the task (or what it is asked) exists once, for an executor's task."""
    return int(bool(value) and task.executor is not None)


# What a failed attempt tries next, in order; when every stage is used up, a person is asked (or the task
# fails, or is skipped when optional). ``after_attempt`` interprets it; a different chain is a different
# list, not different code.
FAILURE_CHAIN: tuple[Stage, ...] = (
    Stage(key="at_once", allowed=lambda t: t.retry.at_once,
          move=lambda t, used, now, message: (f"retry {used} at once: {message}", {})),
    Stage(key="later", allowed=lambda t: t.retry.later, move=_later),
    Stage(key="fallback", allowed=lambda t: _for_an_executor(t.retry.fallback_executor, t),
          move=lambda t, used, now, message: (
              f"another executor ({t.retry.fallback_executor}): {message}",
              {"executor": t.retry.fallback_executor},
          )),
    Stage(key="simplified", allowed=lambda t: _for_an_executor(t.retry.simplified, t),
          move=lambda t, used, now, message: (
              f"a simpler description: {message}", {"description": t.retry.simplified}
          )),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Attempt:
    """One attempt's outcome, with what every rule of ``after_attempt`` reads."""

    task: Task
    state: TaskState
    outcome: str
    message: str
    data: dict[str, Any]
    now: float
    context: dict[str, Any]
    run: RunRecord
    stage: dict[str, Any]
    overrides: dict[str, Any]
    diagnostics: dict[str, Any]


def after_attempt(
    task: Task,
    state: TaskState,
    *,
    outcome: str,
    message: str,
    data: dict[str, Any],
    idempotent: bool,
    now: float,
    executor_failures: int,
    context: dict[str, Any],
    run: RunRecord,
    chain: tuple[Stage, ...] = FAILURE_CHAIN,
) -> Move:
    """Where one attempt's ``outcome`` takes its task: a completed one onward (or round its loop, or to
    a review); a failed one through triage (a busy resource, a call that never started, a refusal, an
    effect that may have happened, an open breaker) and then along ``chain``."""
    at = _Attempt(
        task=task,
        state=state,
        outcome=outcome,
        message=message,
        data=data,
        now=now,
        context=context,
        run=run,
        stage=dict(state.overrides.get("stage") or {}),
        overrides={k: v for k, v in state.overrides.items() if k != "not_before"},
        diagnostics={"outcome": outcome, "message": message, "attempt": state.attempts,
                     "evidence": _evidence(data)},
    )  # fmt: skip
    if outcome == "completed":
        return _completed(at)
    triaged = _triage(at, idempotent, executor_failures)
    if triaged is not None:
        return triaged
    for stage in chain:
        used = int(at.stage.get(stage.key, 0))
        if used < stage.allowed(task):
            said, changes = stage.move(task, used + 1, now, message)
            progress = {**at.stage, stage.key: used + 1}
            return Move(task.id, "pending", said, overrides={**at.overrides, "stage": progress, **changes},
                        diagnostics=at.diagnostics)  # fmt: skip
    return _ask(at, "failed", f"{outcome}: {message}")


def _completed(at: _Attempt) -> Move:
    task, outputs = at.task, outputs_of(at.task, at.data)
    iterations = at.state.iterations + 1
    if task.loop is not None:
        seen = {**at.context, **outputs}
        until = task.loop.until
        if until.task == task.id:
            done = "completed" in until.status and (until.key is None or seen.get(until.key) == until.equals)
        else:
            done = holds(until, at.run, seen)
        if not done and iterations >= task.loop.max_iterations:
            return Move(
                task.id,
                "waiting_for_human",
                f"the loop reached its bound of {task.loop.max_iterations} without its condition",
                review={"kind": "loop_bound", "answer": None},
                iterations=iterations,
                outputs=outputs,
                diagnostics=at.diagnostics,
            )
        if not done:
            return Move(task.id, "pending", f"iteration {iterations} done; again", iterations=iterations,
                        outputs=outputs, overrides={**at.overrides, "stage": {}})  # fmt: skip
    if task.review == "after":
        return Move(
            task.id,
            "waiting_for_human",
            "done; waits for a person's review of the result",
            review={"kind": "after", "answer": None},
            iterations=iterations,
            outputs=outputs,
            diagnostics=at.diagnostics,
        )
    return Move(task.id, "completed", at.message, iterations=iterations, outputs=outputs,
                diagnostics=at.diagnostics)  # fmt: skip


def _triage(at: _Attempt, idempotent: bool, executor_failures: int) -> Move | None:
    """What a failed attempt is before any retry: a wait, a safe rerun, or a question; None: a failure."""
    task, outcome, message = at.task, at.outcome, at.message
    if outcome == "busy":
        return _busy(at)
    if outcome == "not_started":
        # Its starter died before the worker began, and the claim was abandoned so it never will: running
        # it again is safe for any task and is no failure of the task.
        return Move(task.id, "pending", f"it never started ({message}); again", overrides=at.overrides)
    if outcome in ("rejected", "not_found"):
        return _ask(at, "refused", f"the executor refused the call: {message}")
    cut = int(at.stage.get("interrupted", 0))
    if outcome == "unknown" and idempotent and at.data.get("inline") and cut < INTERRUPTIONS:
        # An inline handler dies with the executor it runs in (a crash, a kill): no failure of the
        # task's, so no retry of its is spent; a bound all the same, for a handler that takes its
        # process down every time. (A worker that died on its own goes through the chain, with backoff.)
        stage = {**at.stage, "interrupted": cut + 1}
        return Move(task.id, "pending", f"its process died mid-run ({message}); it is idempotent: again",
                    overrides={**at.overrides, "stage": stage}, diagnostics=at.diagnostics)  # fmt: skip
    if outcome == "unknown" and not idempotent:
        return _ask(at, "unknown", f"its worker died mid-run; it may or may not have taken effect: {message}")
    failures = 1 + sum(
        1 for a in at.run.attempts_of(task.id) if a.status in FAILED and a.attempt != at.state.attempts
    )
    if failures >= BREAKER_TASK or executor_failures >= BREAKER_EXECUTOR:
        return _ask(
            at,
            "breaker",
            f"circuit open: this path failed {max(failures, executor_failures)} times; {message}",
        )
    return None


def _busy(at: _Attempt) -> Move:
    """A resource another job holds: the task waits its turn, backing off, up to its bound."""
    now, stage = at.now, at.stage
    since = float(stage.get("waiting_since") or now)
    bound = at.task.timeout_s or RESOURCE_WAIT_S
    resource = str(at.data.get("resource") or "?")
    holder = at.data.get("blocked_by") or "another job"
    if now - since >= bound:
        return _ask(
            at,
            "busy",
            f"resource {resource} stayed in use for {now - since:.0f} s (by {holder}): {at.message}",
        )
    waits = int(stage.get("waits", 0)) + 1
    pause = min(RESOURCE_POLL_MAX_S, RESOURCE_POLL_S * 2 ** min(waits - 1, 4))
    stage = {**stage, "waiting_since": since, "waiting_for": [resource], "waits": waits}
    return Move(
        at.task.id,
        "pending",
        f"waits for {resource} (in use by {holder}) since {now - since:.0f} s; again in {pause:g} s",
        overrides={**at.overrides, "stage": stage, "not_before": now + pause},
        diagnostics=at.diagnostics,
    )


def _ask(at: _Attempt, kind: str, why: str) -> Move:
    """The end of the chain: a person is asked (or the task fails, or, optional, is skipped)."""
    task, overrides = at.task, {**at.overrides, "stage": at.stage}
    # Only a task that failed (its retries used up) is skipped for being optional: a call the executor
    # refused, or one whose worker died mid-effect, still goes to a person.
    if task.optional and kind in ("failed", "breaker"):
        return Move(task.id, "skipped", f"skipped (optional): {why}", diagnostics=at.diagnostics,
                    overrides=overrides)  # fmt: skip
    if not task.retry.then_ask_person:
        return Move(task.id, "failed", why, diagnostics=at.diagnostics, overrides=overrides)
    return Move(
        task.id,
        "waiting_for_human",
        why,
        review={"kind": kind, "answer": None, "context": _packed(task, at.context)},
        diagnostics=at.diagnostics,
        overrides=overrides,
    )


def _before(task: Task, state: TaskState, context: dict[str, Any]) -> dict[str, Any]:
    """The review a task waits on before it runs. Arguments read from the context are read now and
    shown: the person approves these values, and exactly these run (``service.answer`` pins them)."""
    review: dict[str, Any] = {"kind": "before", "answer": None}
    if task.call is not None and task.call.args_from and "args" not in state.overrides:
        review["args"], _ = call_args(task, state, context)
    return review


def _packed(task: Task, context: dict[str, Any]) -> dict[str, Any]:
    """The context a person needs to decide about ``task``: the keys it reads, each bounded."""
    return {key: _evidence({"v": context[key]})["v"] for key in task.inputs if key in context}


def _evidence(data: dict[str, Any]) -> dict[str, Any]:
    """A bounded excerpt of a result's data for diagnostics (what a person needs to decide)."""
    out: dict[str, Any] = {}
    for key, value in list(data.items())[:12]:
        text = repr(value) if not isinstance(value, str | int | float | bool | None) else value
        out[key] = text[:400] if isinstance(text, str) else text
    return out
