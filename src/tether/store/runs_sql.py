"""Runs in the database: ``SqlRunStore``, the SQL behind ``RunStore`` (store/runs.py has the records).

Reads build a run's record from its rows (the engine's hot statements are built once); writes append
their event (topic ``run:<id>``) in the same transaction, bump the run's revision for every task they
change, and are idempotent where the engine may repeat them after a crash, compare-and-set where a
person answers (a review is answered once). It also prunes ended runs of this installation; the queue
of runs waiting for a resource is ``resource_queue.py``, mixed in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, delete, func, insert, select, update

from tether.errors import StoreError
from tether.events import RunChanged, RunTaskChanged
from tether.store import fast, schema
from tether.store import run_statements as q
from tether.store.database import Database
from tether.store.events import append_event
from tether.store.jobs import now
from tether.store.resource_queue import ResourceQueue
from tether.store.runs import (
    RUN_STATUSES,
    RUN_TERMINAL,
    TASK_ENDED,
    AttemptRecord,
    RunRecord,
    TaskState,
    Written,
)

R = schema.runs
RT = schema.run_tasks
RA = schema.run_attempts
W = schema.resource_waits


class SqlRunStore(ResourceQueue):
    """Runs in the home's database (SQLite or PostgreSQL), with their resource queue."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.installation = db.installation

    # -- reading --------------------------------------------------------------------------------

    def get(self, run_id: str) -> RunRecord | None:
        with self.db.read() as conn:
            row = conn.execute(q.RUN, {"rid": run_id}).first()
            if row is None:
                return None
            tasks = tuple(TaskState.from_row(r) for r in conn.execute(q.TASKS, {"rid": run_id}))
            attempts = tuple(AttemptRecord.from_row(r) for r in conn.execute(q.ATTEMPTS, {"rid": run_id}))
        return RunRecord.from_row(row, tasks, attempts)

    def view(
        self,
        run_id: str,
        *,
        task_ids: list[str] | None = None,
        attempts_of: str | None = None,
        failed_attempts: bool = False,
    ) -> RunRecord | None:
        """A narrow read for the engine: the run without its plan, the tasks ``task_ids`` (all when
        None), the attempts of task ``attempts_of`` and, with ``failed_attempts``, every failed one."""
        with self.db.read() as conn:
            row = conn.execute(q.HEAD, {"rid": run_id}).first()
            if row is None:
                return None
            if task_ids is None:
                rows = conn.execute(q.TASKS, {"rid": run_id})
            else:
                rows = conn.execute(q.TASKS_IN, {"rid": run_id, "tids": list(task_ids)}) if task_ids else ()
            tasks = tuple(TaskState.from_row(r) for r in rows)
            attempts: list[AttemptRecord] = []
            if attempts_of is not None:
                attempts += [
                    AttemptRecord.from_row(r)
                    for r in conn.execute(q.ATTEMPTS_OF, {"rid": run_id, "tid": attempts_of})
                ]
            if failed_attempts:
                rows = conn.execute(q.FAILED_ATTEMPTS, {"rid": run_id})
                attempts += [AttemptRecord.from_row(r) for r in rows if r._mapping["task_id"] != attempts_of]
        return RunRecord.from_row(row, tasks, tuple(attempts))

    def heads(self, run_ids: Sequence[str]) -> dict[str, RunRecord]:
        """The heads (no plan, no tasks) of those of ``run_ids`` on record, in one read."""
        if not run_ids:
            return {}
        with self.db.read() as conn:
            rows = conn.execute(q.HEADS, {"rids": sorted(set(run_ids))})
            return {head.run_id: head for head in map(RunRecord.from_row, rows)}

    def changes(
        self, run_id: str, since: int, *, plan: bool = False
    ) -> tuple[RunRecord, list[TaskState]] | None:
        """The run's head (no tasks; its plan only with ``plan``) and the tasks changed after revision
        ``since`` (every task for -1): a reader that keeps what it saw reads only what moved since (the
        engine's decisions), and the plan with it while it has none."""
        with self.db.read() as conn:
            row = fast.first(conn, q.RUN if plan else q.HEAD, {"rid": run_id})
            if row is None:
                return None
            head = RunRecord.from_row(row)
            if head.rev <= since:
                return head, []
            changed = [
                TaskState.from_row(r) for r in fast.execute(conn, q.CHANGED, {"rid": run_id, "since": since})
            ]
        return head, changed

    def plan(self, run_id: str) -> tuple[dict[str, Any], int]:
        """A run's plan and its version."""
        with self.db.read() as conn:
            row = conn.execute(q.PLAN, {"rid": run_id}).first()
        if row is None:
            raise StoreError(f"no run {run_id!r}")
        return json.loads(row[0]), int(row[1])

    def list(self, *, limit: int = 50, status: str | None = None, mine: bool = False) -> list[RunRecord]:
        """The newest runs (only this installation's with ``mine``), newest first."""
        query = select(R).order_by(R.c.created_at.desc(), R.c.run_id.desc()).limit(limit)
        if status is not None:
            query = query.where(R.c.status == status)
        if mine:
            query = query.where(R.c.installation == self.db.installation.id)
        with self.db.read() as conn:
            return [RunRecord.from_row(row) for row in conn.execute(query)]

    def task_counts(self, run_ids: list[str]) -> dict[str, tuple[int, int]]:
        """(tasks, tasks ended) of each of ``run_ids`` (a run with no task yet is left out)."""
        if not run_ids:
            return {}
        ended = func.sum(case((RT.c.status.in_(sorted(TASK_ENDED)), 1), else_=0))
        query = select(RT.c.run_id, func.count(), ended).where(RT.c.run_id.in_(run_ids)).group_by(RT.c.run_id)
        with self.db.read() as conn:
            return {row[0]: (int(row[1]), int(row[2] or 0)) for row in conn.execute(query)}

    def ids_with_prefix(self, prefix: str, limit: int = 5) -> list[str]:
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = select(R.c.run_id).where(R.c.run_id.like(pattern, escape="\\")).limit(limit)
        with self.db.read() as conn:
            return [row[0] for row in conn.execute(query)]

    def active(self) -> list[RunRecord]:
        """This installation's runs that are not over (running, or paused for a person)."""
        query = select(R).where(
            R.c.status.in_(("running", "waiting_for_human")), R.c.installation == self.installation.id
        )
        with self.db.read() as conn:
            return [RunRecord.from_row(row) for row in conn.execute(query)]

    # -- writing --------------------------------------------------------------------------------

    def create(self, run_id: str, *, goal: str, plan: dict[str, Any], caller: str) -> RunRecord:
        at = now()
        with self.db.write() as conn:
            row = {
                "run_id": run_id, "goal": goal, "status": "running", "plan": q.dumps(plan), "caller": caller,
                "segment": 0, "plan_version": 0, "message": "", "created_at": at, "updated_at": at,
                **self.installation.values(),
            }  # fmt: skip
            if fast.first(conn, q.CREATE[conn.dialect.name], row) is None:  # one statement: new, or not
                raise StoreError(f"a run {run_id!r} exists already")
            rows = [
                {
                    "run_id": run_id, "task_id": task["id"], "position": position, "status": "pending",
                    "attempts": 0, "iterations": 0, "message": "", "diagnostics": "{}", "outputs": "{}",
                    "overrides": "{}", "updated_at": at,
                }
                for position, task in enumerate(plan["tasks"])
            ]  # fmt: skip
            if len(rows) == 1:
                fast.execute(conn, q.INSERT_TASKS, rows[0])
            elif rows:
                conn.execute(q.INSERT_TASKS, rows).all()  # one statement for every task
            append_event(conn, RunChanged(topic=f"run:{run_id}", run_id=run_id, status="running"))
        tasks = tuple(
            TaskState(
                task_id=r["task_id"], position=r["position"], status="pending", attempts=0, iterations=0,
                message="", diagnostics={}, outputs={}, review=None, overrides={}, started_at=None,
                ended_at=None, updated_at=at,
            )
            for r in rows
        )  # fmt: skip
        return RunRecord(
            run_id=run_id, goal=goal, status="running", plan=plan, caller=caller, segment=0, message="",
            created_at=at, updated_at=at, ended_at=None, tasks=tasks, installation=self.installation.id,
            host=self.installation.host,
        )  # fmt: skip

    def add_tasks(
        self,
        run_id: str,
        plan: dict[str, Any],
        new_ids: list[str],
        *,
        why: str = "proposed by an earlier task",
    ) -> None:
        """Tasks that join the run's plan (already validated against the whole plan): follow-ups an
        executor proposed, or a goal's milestones once its planner has answered."""
        at = now()
        with self.db.write() as conn:
            known = {r[0] for r in conn.execute(select(RT.c.task_id).where(RT.c.run_id == run_id))}
            rev = q.bump(conn, run_id)
            conn.execute(
                update(R)
                .where(R.c.run_id == run_id)
                .values(plan=q.dumps(plan), plan_version=R.c.plan_version + 1, updated_at=at)
            )
            for position, task in enumerate(plan["tasks"]):
                if task["id"] in new_ids and task["id"] not in known:
                    conn.execute(
                        insert(RT),
                        {
                            "run_id": run_id, "task_id": task["id"], "position": position,
                            "status": "pending", "attempts": 0, "iterations": 0, "message": why[:200],
                            "diagnostics": "{}", "outputs": "{}", "overrides": "{}", "updated_at": at,
                            "rev": rev,
                        },
                    )  # fmt: skip
                    append_event(
                        conn,
                        RunTaskChanged(
                            topic=f"run:{run_id}", run_id=run_id, task_id=task["id"], status="pending",
                            message=why,
                        ),
                    )  # fmt: skip

    def set_planning(self, run_id: str, calls: list[dict[str, Any]]) -> None:
        """What planning the run's goal cost: its planner's model calls (``agent/usage.py`` records)."""
        with self.db.write() as conn:
            conn.execute(update(R).where(R.c.run_id == run_id).values(planning=q.dumps(calls)))

    def set_status(
        self, run_id: str, status: str, message: str = "", *, only_from: tuple[str, ...] | None = None
    ) -> bool:
        """Move the run to ``status`` unless it is over (or not in ``only_from``); True if it moved."""
        with self.db.write() as conn:
            return self.set_status_in(conn, run_id, status, message, only_from=only_from)

    def set_status_in(
        self,
        conn: Any,
        run_id: str,
        status: str,
        message: str = "",
        *,
        only_from: tuple[str, ...] | None = None,
    ) -> bool:
        """``set_status`` in ``conn``'s transaction (a run that ends with its last task's end)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        at = now()
        values = {"rid": run_id, "v_status": status, "v_message": message, "at": at}
        allowed = tuple(only_from or ("running", "waiting_for_human"))
        moved = fast.first(conn, q.set_status(status in RUN_TERMINAL, allowed), values) is not None
        if moved:
            changed = RunChanged(topic=f"run:{run_id}", run_id=run_id, status=status, message=message)
            append_event(conn, changed)
        return bool(moved)

    def next_segment(self, run_id: str, *, expect: int) -> int | None:
        """Hand the run to its next workflow segment (compare-and-set on ``expect``); the new number, or
        None when another process did it first."""
        with self.db.write() as conn:
            moved = conn.execute(
                update(R)
                .where(R.c.run_id == run_id, R.c.segment == expect)
                .values(segment=expect + 1, updated_at=now())
            ).rowcount
        return expect + 1 if moved else None

    def update_task(self, run_id: str, task_id: str, *, event: bool = True, **values: Any) -> None:
        """Set a task's fields (``status``, ``message``, ``diagnostics``, ``outputs``, ``review``,
        ``overrides``, ``iterations``); JSON fields are encoded here."""
        with self.db.write() as conn:
            self._update_task(conn, run_id, task_id, event, values)

    def move_task(
        self, run_id: str, task_id: str, *, waiting: tuple[Sequence[str], float] | None, **values: Any
    ) -> None:
        """``update_task`` with the resource queue kept in step, in the same transaction (as ``settle``
        does): the task stays in (or joins) the queue for ``waiting`` = (resources, since) when it waits
        for one, and leaves it otherwise."""
        with self.db.write() as conn:
            self._queue(conn, run_id, task_id, waiting)
            self._update_task(conn, run_id, task_id, True, values)

    def _update_task(self, conn: Any, run_id: str, task_id: str, event: bool, values: dict[str, Any]) -> None:
        row = q.task_row(values, now())
        row["rev"] = q.bump(conn, run_id)
        conn.execute(q.set_task(tuple(row), False), q.task_params(run_id, task_id, row))
        if event and "status" in values:
            append_event(
                conn,
                RunTaskChanged(
                    topic=f"run:{run_id}", run_id=run_id, task_id=task_id, status=values["status"],
                    message=str(values.get("message", "")),
                ),
            )  # fmt: skip

    def begin_attempt(
        self, run_id: str, task_id: str, attempt: int, execution_id: str, how: dict[str, Any]
    ) -> None:
        """Record attempt ``attempt`` as started (a repeat after a crash is a no-op)."""
        self.begin_attempts(run_id, [(task_id, attempt, execution_id, how)])

    def begin_attempts(self, run_id: str, wave: list[tuple[str, int, str, dict[str, Any]]]) -> None:
        """Record a wave of attempts (task, attempt, execution id, how) as started, in one transaction;
        an attempt on record already is left as it is (a decision replayed after a crash)."""
        if not wave:
            return
        with self.db.write() as conn:
            self.begin_in(conn, run_id, wave)

    def begin_in(
        self, conn: Any, run_id: str, wave: list[tuple[str, int, str, dict[str, Any]]], rev: int | None = None
    ) -> Written | None:
        """``begin_attempts`` in ``conn``'s transaction (an inline call's claim of its job: the attempt and
        its job go on record together); ``rev``: the revision it took already. None: all on record, or
        the run has ended (nothing is written: a cancel stays one, and an attempt number is never
        taken without its task's)."""
        if rev is None:
            rev = q.bump_open(conn, run_id)
            if rev is None:  # the run has ended (a cancel came first): none of its attempts starts
                return None
        at, started = now(), list[TaskState]()
        for task_id, attempt, execution_id, how in wave:
            row = {
                "run_id": run_id, "task_id": task_id, "attempt": attempt, "execution_id": execution_id,
                "status": "running", "message": "", "how": q.dumps(how), "started_at": at,
                "duration_seconds": 0.0, **self.installation.values(),
            }  # fmt: skip
            if fast.first(conn, q.BEGIN_ATTEMPT[conn.dialect.name], row) is None:
                continue  # on record already
            values = {"rid": run_id, "tid": task_id, "n": attempt, "at": at, "rev": rev}
            started += map(TaskState.from_row, fast.execute(conn, q.START_TASK, values))
            append_event(
                conn,
                RunTaskChanged(
                    topic=f"run:{run_id}", run_id=run_id, task_id=task_id, status="running",
                    attempt=attempt, execution_id=execution_id,
                ),
            )  # fmt: skip
        return Written(rev, tuple(started)) if started else None

    def settle(
        self,
        run_id: str,
        task_id: str,
        attempt: int,
        *,
        outcome: str,
        message: str,
        duration_s: float,
        task: dict[str, Any],
        waiting: tuple[Sequence[str], float] | None = None,
    ) -> bool:
        """End attempt ``attempt`` and move its task as ``task`` says (``status``, ``message``, JSON
        fields …), with the resource queue kept in step, in one transaction: the task stays in (or joins)
        the queue for ``waiting`` = (resources, since) when it waits for one, and leaves it otherwise —
        a settled task is never left in the queue, nor a waiting one out of it, by a crash between two
        writes. The task moves only while it is still ``running`` (a run cancelled meanwhile keeps its
        ``cancelled``); True if it moved."""
        with self.db.write() as conn:
            return self.settle_in(
                conn, run_id, task_id, attempt, outcome=outcome, message=message, duration_s=duration_s,
                task=task, waiting=waiting,
            ) is not None  # fmt: skip

    def settle_in(
        self,
        conn: Any,
        run_id: str,
        task_id: str,
        attempt: int,
        *,
        outcome: str,
        message: str,
        duration_s: float,
        task: dict[str, Any],
        waiting: tuple[Sequence[str], float] | None = None,
        queued: bool = True,
    ) -> Written | None:
        """``settle`` in ``conn``'s transaction (an inline call's outcome: its job and its attempt end
        together). ``queued`` False: the caller knows the task never joined a resource's queue, so there
        is no place in it to give up. What it wrote, the run's head with it; None if the task did not
        move."""
        at = now()
        row = q.task_row(task, at)
        if waiting is not None or queued:
            self._queue(conn, run_id, task_id, waiting)
        found = fast.first(conn, q.BUMP_HEAD, {"rid": run_id})
        head = None if found is None else RunRecord.from_row(found)
        row["rev"] = 0 if head is None else head.rev
        fast.execute(
            conn, q.END_ATTEMPT,
            {"rid": run_id, "tid": task_id, "n": attempt, "v_status": outcome, "v_message": message,
             "at": at, "v_duration": duration_s},
        )  # fmt: skip
        moved = fast.first(conn, q.set_task(tuple(row), True, True), q.task_params(run_id, task_id, row))
        if moved is None:
            return None
        append_event(
            conn,
            RunTaskChanged(
                topic=f"run:{run_id}", run_id=run_id, task_id=task_id, status=str(task["status"]),
                attempt=attempt, message=str(task.get("message", ""))[:2000],
            ),
        )  # fmt: skip
        return Written(row["rev"], (TaskState.from_row(moved),), head)

    def answer(
        self,
        run_id: str,
        task_id: str,
        answer: dict[str, Any],
        *,
        status: str,
        overrides: dict[str, Any] | None = None,
    ) -> str | None:
        """Record the person's answer to the review ``task_id`` waits on and move the task to ``status``
        — once: compare-and-set on a pending review of a run that waits. The run's status afterwards
        (``running`` when nothing else waits), or None if there was nothing to answer."""
        with self.db.write() as conn:
            row = conn.execute(
                select(RT.c.review, RT.c.status).where(RT.c.run_id == run_id, RT.c.task_id == task_id)
            ).first()
            run = conn.execute(q.RUN, {"rid": run_id}).first()
            if row is None or row[0] is None or run is None or row[1] != "waiting_for_human":
                return None
            review = json.loads(row[0])
            if review.get("answer") is not None:
                return None
            review.update(answer)
            at = now()
            # The task's message says what the person did (it said "waits for a person's approval").
            said = f"{answer.get('answer')}ed by {answer.get('by', 'a person')}".replace("eed ", "ed ")
            if answer.get("reason"):
                said += f": {str(answer['reason'])[:300]}"
            values: dict[str, Any] = {
                "review": q.dumps(review), "status": status, "updated_at": at, "rev": q.bump(conn, run_id),
                "message": said,
            }  # fmt: skip
            if overrides is not None:
                values["overrides"] = q.dumps(overrides)
            if status in TASK_ENDED:
                values["ended_at"] = at
            moved = conn.execute(
                update(RT)
                .where(RT.c.run_id == run_id, RT.c.task_id == task_id, RT.c.review == row[0])
                .values(**values)
            ).rowcount
            if not moved:
                return None
            append_event(
                conn,
                RunTaskChanged(
                    topic=f"run:{run_id}", run_id=run_id, task_id=task_id, status=status,
                    message=f"{answer.get('answer')} by {answer.get('by', 'a person')}",
                ),
            )  # fmt: skip
            still_waiting = conn.execute(
                select(RT.c.task_id).where(RT.c.run_id == run_id, RT.c.status == "waiting_for_human")
            ).first()
            run_status = run._mapping["status"]
            if still_waiting is None and run_status == "waiting_for_human":
                conn.execute(
                    update(R).where(R.c.run_id == run_id).values(status="running", message="", updated_at=at)
                )
                append_event(conn, RunChanged(topic=f"run:{run_id}", run_id=run_id, status="running"))
                run_status = "running"
        return str(run_status)

    def reopen(self, run_id: str) -> bool:
        """A failed or cancelled run runs again: its failed, rejected and cancelled tasks (and those
        skipped because of them) are pending once more, their retry chains reset."""
        at = now()
        with self.db.write() as conn:
            moved = conn.execute(
                update(R)
                .where(R.c.run_id == run_id, R.c.status.in_(("failed", "cancelled")))
                .values(status="running", message="resumed", ended_at=None, updated_at=at)
            ).rowcount
            if not moved:
                return False
            rev = q.bump(conn, run_id)
            for row in conn.execute(select(RT).where(RT.c.run_id == run_id)).fetchall():
                state = TaskState.from_row(row)
                again = state.status in (
                    "failed",
                    "rejected",
                    "cancelled",
                    "running",
                    "waiting_for_human",
                ) or (state.status == "skipped" and "did not succeed" in state.message)
                if again:
                    overrides = {k: v for k, v in state.overrides.items() if k not in ("stage", "not_before")}
                    conn.execute(
                        update(RT)
                        .where(RT.c.run_id == run_id, RT.c.task_id == state.task_id)
                        .values(status="pending", review=None, overrides=q.dumps(overrides), ended_at=None,
                                updated_at=at, message="resumed", rev=rev)
                    )  # fmt: skip
            append_event(
                conn, RunChanged(topic=f"run:{run_id}", run_id=run_id, status="running", message="resumed")
            )
        return True

    def delete_ended(self, before: str) -> list[tuple[str, int]]:
        """Forget this installation's runs that ended before ``before`` (ISO time); (id, last segment) of
        each, for pruning its DBOS log."""
        mine = R.c.installation == self.installation.id
        with self.db.write() as conn:
            rows = [
                (r[0], int(r[1]))
                for r in conn.execute(
                    select(R.c.run_id, R.c.segment).where(
                        R.c.ended_at.is_not(None), R.c.ended_at < before, mine
                    )
                )
            ]
            ids = [run_id for run_id, _ in rows]
            for chunk in range(0, len(ids), 500):
                part = ids[chunk : chunk + 500]
                conn.execute(delete(RA).where(RA.c.run_id.in_(part)))
                conn.execute(delete(W).where(W.c.run_id.in_(part)))
                conn.execute(delete(RT).where(RT.c.run_id.in_(part)))
                conn.execute(delete(R).where(R.c.run_id.in_(part)))
        return rows
