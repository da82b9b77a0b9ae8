"""The next inline call of a run, decided and claimed in the transaction that ends the one before.

A run's inline calls run inside its decision step (``engine.advance``), each with its attempt and job
claimed in one transaction before its handler runs and ended in another after it, and each followed by
a decision that reads what changed: three transactions a task of a chain. When an inline attempt ends,
the transaction that settles it holds the run's row (``settle_in`` takes its next revision and reads
the head back). If that revision is the one this process expected, no one else wrote the run since the
decision that opened the attempt, so the run as this process holds it (the decision's read, and the
rows its own writes returned) is the run on record: the next decision is taken there, under the row's
lock. When it is one inline call that may run again (``idempotent``) and that its executor admits on
the spot (``Executor.claim_in``: no resource, requirement, probe or consent), its attempt and its job
are claimed in that same transaction, and ``engine.advance`` runs it next without reading the run: one
transaction a task. When it is the run's end (completed), the run's status goes on record there too.

Only a call that may run again is claimed ahead. Between that commit and its handler's first line,
a crash leaves a claim that recovery cannot tell from one whose handler began: it is ``unknown``, which
an idempotent task runs again (``policies.INTERRUPTIONS``) but which would take a must-run-once task to
a person. A must-run-once call keeps a claim of its own, right before its handler, as before.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from tether.execution.admission import execution_id_for
from tether.execution.inline import Claim
from tether.store.runs import RunRecord, TaskState, Written
from tether.supervisor.host import Host, epoch
from tether.supervisor.plan import Task
from tether.supervisor.policies import as_text_where_text, call_args, context_of, schedule
from tether.supervisor.reading import Opened, how

log = logging.getLogger("tether.supervisor")


@dataclass(frozen=True)
class Ahead:
    """An attempt claimed ahead, with the run as it is on record at revision ``rev``: what runs next."""

    opened: Opened
    number: int
    how: dict[str, Any]
    claim: Claim
    rev: int


@dataclass(frozen=True)
class Ended:
    """The run's end, decided and on record in the transaction that settled its last attempt."""

    status: str
    message: str


def next_in(
    h: Host, conn: Any, opened: Opened, claimed_at: int | None, settled: Written
) -> Ahead | Ended | None:
    """In the transaction that settled ``opened``'s attempt (``settled``: what it wrote, the head read
    back), the next attempt claimed ahead, or the run's end on record (``Ended``); None when the next
    decision must read the run (another writer moved it since ``claimed_at``, the revision this
    attempt's claim took), is not one inline call that may run again nor the run's completion, or its
    executor would not admit the call here. A decision that fails is left to the decision that reads
    the run; only the store's errors leave here, and undo the transaction (the end of the attempt
    before with it, which ``inline_attempt`` then settles as ``finish`` does)."""
    try:
        found = _next(h, opened, claimed_at, settled)
    except Exception:
        log.exception("the next call of run %s could not be decided ahead", opened.run.run_id)
        return None
    if found is None:
        return None
    if isinstance(found, Ended):  # the run's end goes on record with its last task's
        moved = h.runtime.runs.set_status_in(conn, opened.run.run_id, found.status, found.message)
        return found if moved else None
    run, task, state, number, args, manner = found
    plan, run_id, head_rev = opened.known.plan, run.run_id, run.rev
    assert task.call is not None
    execution_id = execution_id_for("run", run_id, task.id, str(number))
    began: list[Written | None] = []
    claim = h.executor.claim_in(
        conn, task.call.task, args, caller=plan.caller, grants=plan.grants_of(), origin=f"run:{run_id}",
        step_id=f"{run_id}/{task.id}/{number}", execution_id=execution_id,
        started=lambda c: began.append(
            h.runtime.runs.begin_in(c, run_id, [(task.id, number, execution_id, manner)], rev=head_rev)
        ),
    )  # fmt: skip
    if claim is None:
        return None
    # Claimed: it must run now (a decision that read the run would find it claimed by this live process).
    started = began[0].tasks[0] if began and began[0] is not None else replace(state, status="running")
    run = replace(run, tasks=tuple(started if t.task_id == task.id else t for t in run.tasks))
    opened_next = Opened(opened.known, run, task, replace(started, attempts=number), execution_id)
    return Ahead(opened_next, number, manner, claim, head_rev)


def _next(
    h: Host, opened: Opened, claimed_at: int | None, settled: Written
) -> tuple[RunRecord, Task, TaskState, int, dict[str, Any], dict[str, Any]] | Ended | None:
    """The run as it is on record, and the call decided next in it (task, its state, attempt number,
    arguments, how it is called), when it may be claimed ahead; or the run's end, when it completed."""
    head, before, known = settled.head, opened.run, opened.known
    if head is None or claimed_at is None or head.rev != claimed_at + 1:
        return None
    if (head.status, head.segment, head.plan_version) != ("running", before.segment, before.plan_version):
        return None
    if any(known.resources.values()):  # a resource's queue would have a say in the decision
        return None
    (ended,) = settled.tasks
    run = replace(head, tasks=tuple(ended if t.task_id == ended.task_id else t for t in before.tasks))
    plan = known.plan
    decision = schedule(
        plan, run, now=time.time(), started=epoch(run.created_at), resources=known.resources, first_waiters={}
    )
    if decision.moves:
        return None
    if decision.end == "completed" and not decision.run:
        return Ended("completed", decision.message)
    if decision.end is not None or len(decision.run) != 1:
        return None
    task_id, number = decision.run[0]
    task, state = known.tasks[task_id], run.task(task_id)
    if task.call is None or state is None or state.review is not None:
        return None
    spec = h.executor.registry.get(task.call.task, plan.caller, plan.grants_of())
    if spec is None or not spec.idempotent:
        return None
    args, missing = call_args(task, state, context_of(plan, run))
    if missing:
        return None
    return run, task, state, number, as_text_where_text(spec, args), how(task, state, plan.caller)
