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

from dataclasses import dataclass, field
from typing import Any

from tether.store.runs import TASK_DONE, TASK_ENDED, RunRecord, TaskState
from tether.supervisor.plan import Plan, Task, When
from tether.tasks.spec import TaskSpec

BREAKER_TASK = 4  # failed attempts of one task before its retries are skipped
BREAKER_EXECUTOR = 6  # failed attempts on one executor (profile or caller) across the run
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
        if task.when is not None:
            if not holds(task.when, run, context):
                decision.moves.append(
                    Move(task.id, "skipped", f"skipped: its condition on {task.when.task} does not hold")
                )
                continue
        else:
            blocked = [d.task_id for d in deps if d is not None and d.status not in TASK_DONE]
            if blocked:
                decision.moves.append(
                    Move(task.id, "skipped", f"skipped: {', '.join(blocked)} did not succeed")
                )
                continue
        if task.call is not None and task.call.args_from:
            _, missing = call_args(task, state, context)
            if missing:
                decision.moves.append(
                    Move(task.id, "skipped", f"skipped: {', '.join(missing)} is not in the context")
                )
                continue
        due = state.overrides.get("not_before")
        if state.status == "pending" and due is not None and due > now:
            later += 1
            soonest = due if soonest is None else min(soonest, due)
            continue
        review = state.review or {}
        if (
            task.review == "before"
            and state.status == "pending"
            and not (review.get("kind") == "before" and review.get("answer") in ("approve", "edit"))
        ):
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
    if waiting:
        decision.end, decision.message = "waiting_for_human", f"{waiting} task(s) wait for a person"
        return decision
    if later and soonest is not None:
        decision.end, decision.delay_s = "later", max(0.0, soonest - now)
        decision.message = f"a retry is due in {decision.delay_s:.0f} s"
        return decision
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
) -> Move:
    """Where one attempt's ``outcome`` takes its task, by the task's policy chain."""
    stage = dict(state.overrides.get("stage") or {})
    overrides = {k: v for k, v in state.overrides.items() if k != "not_before"}
    diagnostics = {
        "outcome": outcome,
        "message": message,
        "attempt": state.attempts,
        "evidence": _evidence(data),
    }
    if outcome == "completed":
        outputs = outputs_of(task, data)
        iterations = state.iterations + 1
        if task.loop is not None:
            seen = {**context, **outputs}
            until = task.loop.until
            if until.task == task.id:
                done = "completed" in until.status and (
                    until.key is None or seen.get(until.key) == until.equals
                )
            else:
                done = holds(until, run, seen)
            if not done:
                if iterations >= task.loop.max_iterations:
                    return Move(
                        task.id,
                        "waiting_for_human",
                        f"the loop reached its bound of {task.loop.max_iterations} without its condition",
                        review={"kind": "loop_bound", "answer": None},
                        iterations=iterations,
                        outputs=outputs,
                        diagnostics=diagnostics,
                    )
                return Move(
                    task.id,
                    "pending",
                    f"iteration {iterations} done; again",
                    iterations=iterations,
                    outputs=outputs,
                    overrides={**overrides, "stage": {}},
                )
        if task.review == "after":
            return Move(
                task.id,
                "waiting_for_human",
                "done; waits for a person's review of the result",
                review={"kind": "after", "answer": None},
                iterations=iterations,
                outputs=outputs,
                diagnostics=diagnostics,
            )
        return Move(
            task.id, "completed", message, iterations=iterations, outputs=outputs, diagnostics=diagnostics
        )

    retry = task.retry

    def ask(kind: str, why: str) -> Move:
        # Only a task that failed (its retries used up) is skipped for being optional: a call the executor
        # refused, or one whose worker died mid-effect, still goes to a person.
        if task.optional and kind in ("failed", "breaker"):
            return Move(
                task.id, "skipped", f"skipped (optional): {why}", diagnostics=diagnostics,
                overrides={**overrides, "stage": stage},
            )  # fmt: skip
        if not retry.then_ask_person:
            return Move(
                task.id, "failed", why, diagnostics=diagnostics, overrides={**overrides, "stage": stage}
            )
        return Move(
            task.id,
            "waiting_for_human",
            why,
            review={"kind": kind, "answer": None, "context": _packed(task, context)},
            diagnostics=diagnostics,
            overrides={**overrides, "stage": stage},
        )

    if outcome == "busy":
        since = float(stage.get("waiting_since") or now)
        bound = task.timeout_s or RESOURCE_WAIT_S
        resource = str(data.get("resource") or "?")
        holder = data.get("blocked_by") or "another job"
        if now - since >= bound:
            return ask(
                "busy", f"resource {resource} stayed in use for {now - since:.0f} s (by {holder}): {message}"
            )
        waits = int(stage.get("waits", 0)) + 1
        pause = min(RESOURCE_POLL_MAX_S, RESOURCE_POLL_S * 2 ** min(waits - 1, 4))
        stage = {**stage, "waiting_since": since, "waiting_for": [resource], "waits": waits}
        return Move(
            task.id,
            "pending",
            f"waits for {resource} (in use by {holder}) since {now - since:.0f} s; again in {pause:g} s",
            overrides={**overrides, "stage": stage, "not_before": now + pause},
            diagnostics=diagnostics,
        )
    if outcome == "not_started":
        # Its starter died before the worker began, and the claim was abandoned so it never will: running
        # it again is safe for any task and is no failure of the task.
        return Move(task.id, "pending", f"it never started ({message}); again", overrides=overrides)
    if outcome in ("rejected", "not_found"):
        return ask("refused", f"the executor refused the call: {message}")
    if outcome == "unknown" and not idempotent:
        return ask("unknown", f"its worker died mid-run; it may or may not have taken effect: {message}")
    failures = 1 + sum(
        1 for a in run.attempts_of(task.id) if a.status in FAILED and a.attempt != state.attempts
    )
    if failures >= BREAKER_TASK or executor_failures >= BREAKER_EXECUTOR:
        return ask(
            "breaker", f"circuit open: this path failed {max(failures, executor_failures)} times; {message}"
        )
    if stage.get("at_once", 0) < retry.at_once:
        stage["at_once"] = stage.get("at_once", 0) + 1
        return Move(
            task.id,
            "pending",
            f"retry {stage['at_once']} at once: {message}",
            overrides={**overrides, "stage": stage},
            diagnostics=diagnostics,
        )
    if stage.get("later", 0) < retry.later:
        stage["later"] = stage.get("later", 0) + 1
        due = now + retry.backoff_s * 2 ** (stage["later"] - 1)
        return Move(
            task.id,
            "pending",
            f"retry later (in {due - now:.0f} s): {message}",
            overrides={**overrides, "stage": stage, "not_before": due},
            diagnostics=diagnostics,
        )
    if retry.fallback_executor and task.executor is not None and not stage.get("fallback"):
        stage["fallback"] = True
        return Move(
            task.id,
            "pending",
            f"another executor ({retry.fallback_executor}): {message}",
            overrides={**overrides, "stage": stage, "executor": retry.fallback_executor},
            diagnostics=diagnostics,
        )
    if retry.simplified and task.executor is not None and not stage.get("simplified"):
        stage["simplified"] = True
        return Move(
            task.id,
            "pending",
            f"a simpler description: {message}",
            overrides={**overrides, "stage": stage, "description": retry.simplified},
            diagnostics=diagnostics,
        )
    return ask("failed", f"{outcome}: {message}")


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
