"""The executor: the trust boundary every execution passes through, from every interface (contract 2).

``execute(task_id, params, caller=...)`` runs these steps in order and answers every refusal with a
structured ``TaskResult``, never an exception:

1. a new ``execution_id``;
2. look up the spec; 3. exposure check (unknown and unexposed are both ``not_found``);
4. validate params (size and depth limits, strict pydantic types, domain catalogs; wrong values come
   back with the allowed ones);
5. one active job per resource (the live holder of the lock is named);
6. environment pre-check (``requires``);
7. danger policy, last, so the person is only ever asked about a call that would otherwise run:
   ``destructive`` needs a ``Confirmation`` of exactly this call (task + digest of its canonical
   arguments), minted from the person's own act; ``caution`` needs one too unless the caller is a person
   acting directly (``[execution].direct_callers``). Each confirmation is used once;
8. write the signed ``request.json``, record the job, start the worker; 9. wait for the result (sync) or
   the ``running`` handshake (background). ``inline`` tasks run in this process after the same checks.

``control(execution_id, action, caller=...)`` is the one door to existing jobs (status, stop, wait):
a job whose task is not exposed to the caller, or that another origin started when the caller asked for
its own origin only, is ``not_found``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from tether.config import Settings, setting_variables
from tether.errors import ConfigError, ToolNotFound
from tether.execution import process
from tether.execution.admission import (
    Admitted,
    Gate,
    Where,
    check_caller,
    check_execution_id,
    check_origin,
    new_execution_id,
    record_refusal,
)
from tether.execution.environment import worker_env
from tether.execution.inline import Claim, InlineRun, Journal, claimed_in, given_up
from tether.execution.jobs import POLL_S, JobManager, Pruned
from tether.execution.launch import Launch, RequestKey
from tether.execution.placement import Forwarded, Forwarder, Placed, Placement
from tether.execution.protocol import clip
from tether.execution.records import RecordWriter, off_loop
from tether.execution.spawner import Spawner, default_spawner
from tether.runtime import Runtime
from tether.store.jobs import JobRecord
from tether.store.memories import note_fact
from tether.store.workers import WorkerStore
from tether.tasks.confirm import Confirmation, call_digest
from tether.tasks.grants import JOBS_STATUS, Grants
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import CONTROL, OWN, Isolation, Registry
from tether.tasks.validation import validate_params

log = logging.getLogger("tether.executor")

MAINTAIN_EVERY_S = 3600.0  # how often opening a home also applies the retention settings
Action = Literal["status", "stop", "wait"]
ACTIONS: tuple[Action, ...] = ("status", "stop", "wait")


class Executor:
    """Runs tasks of one registry in one tether home. Use as a context manager, or call ``close()``."""

    def __init__(
        self,
        registry: Registry,
        *,
        runtime: Runtime | None = None,
        home: str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
        spawner: Spawner | None = None,
        forwarder: Forwarder | None = None,
    ) -> None:
        """Run ``registry``'s tasks with ``runtime`` (else one opened on ``home``, closed with this).

        ``settings`` replaces the runtime's ``[execution]`` settings for this executor. ``forwarder``
        hands a call to the node that holds its resource (``placement.py``); without one such a call
        is refused, never run on the wrong host."""
        self._owns_runtime = runtime is None
        self.runtime = runtime if runtime is not None else Runtime.open(home, settings=settings)
        self.home = self.runtime.home
        # The tasks this home's settings add (tools imported from its MCP servers) are its registry too.
        # Settings that cannot make them leave them out (commands that list tasks say why): job status
        # and stop, the control plane, work whatever a [[mcp.servers]] entry says.
        try:
            registry = registry.for_home(self.home)
        except ConfigError as exc:
            log.warning("this home's own tasks are left out: %s", exc.message)
        self.registry = registry
        self.settings = settings if settings is not None else self.runtime.settings
        self.store = self.runtime.jobs
        self._spawner = spawner
        peers = WorkerStore(self.runtime.db, self.runtime.cluster_settings.lease_s)
        self.jobs = JobManager(self.home, self.store, self.settings, spawner, peers=peers)
        self.placement = Placement(
            peers, forwarder, home=str(self.home), lease_s=self.runtime.cluster_settings.lease_s
        )
        self._me = process.current()
        self._import_path = import_root(registry.ref) if registry.ref else None
        # One thread writes the records that follow a spawn, so they land in the order they happened.
        self._records = RecordWriter(self.store)
        self._key = RequestKey(self.home)
        self._gate = Gate(registry=registry, home=self.home, settings=self.settings, visible=self._visible)
        self._claims: weakref.WeakValueDictionary[str, Claim] = weakref.WeakValueDictionary()

    @property
    def spawner(self) -> Spawner:
        if self._spawner is None:
            if self.registry.ref is None:
                raise ConfigError("a registry without a ref cannot start workers")
            env = worker_env((*self.registry.env, *self.settings.worker_env, *setting_variables()))
            self._spawner = default_spawner(
                self.registry.ref, self.home, forkserver=self.settings.forkserver, env=env
            )
            self.jobs.spawner = self._spawner
        return self._spawner

    def maintain(self, *, every_s: float = MAINTAIN_EVERY_S) -> None:
        """What a command does when it opens a home: re-attach to live workers, settle dead ones, and
        (at most every ``every_s``) apply the retention settings of ``[store]``."""
        self.jobs.recover()
        self.prune_if_due(every_s=every_s)

    def prune_if_due(self, *, every_s: float = MAINTAIN_EVERY_S) -> bool:
        """``prune`` if no process of this home did for ``every_s`` (a marker in the home says when one
        last did); whether it pruned. Commands call it as they open the home, long-lived executors as
        they go."""
        marker = self.home / "logs" / ".pruned"
        try:
            if time.time() - marker.stat().st_mtime < every_s:
                return False
        except FileNotFoundError:
            pass
        self.prune()
        marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        marker.touch(mode=0o600)
        return True

    def prune(
        self,
        *,
        older_than_days: float | None = None,
        keep: int | None = None,
        dry_run: bool = False,
    ) -> Pruned:
        """Retention: ended executions older than ``older_than_days`` or beyond the newest ``keep`` go
        (folders and records), and so do old events. Defaults come from ``[store]``; 0 means no limit."""
        store = self.runtime.store_settings
        days = store.keep_days if older_than_days is None else older_than_days
        count = store.keep_executions if keep is None else keep
        pruned = self.jobs.prune(
            older_than_s=days * 86_400 if days else None, keep=count or None, dry_run=dry_run
        )
        events = 0
        if not dry_run and store.keep_events:
            before = time.time() - days * 86_400 if days else float("inf")
            events = self.runtime.events.prune(before_ts=before, keep=store.keep_events)
        return dataclasses.replace(pruned, events=events)

    def warm_up(self) -> None:
        """Start the worker spawner now rather than on the first task."""
        start = getattr(self.spawner, "start", None)
        if start is not None:
            start()

    def close(self) -> None:
        self._records.close()  # queued records land before the store closes
        if self._spawner is not None:
            self._spawner.close()
        if self._owns_runtime:
            self.runtime.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute_sync(self, task_id: str, params: dict[str, Any] | None = None, **kwargs: Any) -> TaskResult:
        return asyncio.run(self.execute(task_id, params, **kwargs))

    # -- consent --------------------------------------------------------------------------------

    def confirm(
        self,
        task_id: str,
        params: Mapping[str, Any] | None,
        *,
        caller: str,
        source: str,
        grants: Grants | None = None,
    ) -> Confirmation:
        """A confirmation of exactly this call, for an interface acting on the person's own act (a
        typed command with ``--confirm``). ``ToolNotFound``/``ToolRejected`` for a call that cannot run."""
        spec = self.registry.get(task_id, caller, grants)
        if spec is None:
            raise ToolNotFound(f"no task {task_id!r} is available to {caller}", task_id=task_id)
        validated = validate_params(spec, params)
        clean = {} if validated is None else validated.model_dump(mode="json")
        return Confirmation(task_id=task_id, digest=call_digest(task_id, clean), source=source)

    # -- execute --------------------------------------------------------------------------------

    async def execute(
        self,
        task_id: str,
        params: Mapping[str, Any] | None = None,
        *,
        caller: str,
        grants: Grants | None = None,
        confirmation: Confirmation | None = None,
        detach: bool = False,
        origin: str | None = None,
        step_id: str | None = None,
        execution_id: str | None = None,
        on_start: Callable[[str], None] | None = None,
        wait_owner_s: float = 0.0,
        placed: bool = False,
        journal: Journal | None = None,
    ) -> TaskResult:
        """Run one task for ``caller``. ``confirmation`` only ever from the person, never from a model.

        ``grants`` (an agent's, ``tasks/grants.py``) narrow what ``caller`` may reach: a task outside them
        is ``not_found``. They travel in the signed request, and the worker checks them again.

        ``origin`` says what started it (``thread:<id>``, later ``run:<id>``) and ``step_id`` which of
        its steps; callers that scope control to their origin see only those jobs. ``execution_id``
        makes the call idempotent: the same id never starts a second worker — a second call re-attaches
        to the live one or returns the recorded result (``execution_id_for`` derives one from a step).
        ``on_start(execution_id)`` is called once the execution is on record, before its worker starts
        (to follow its progress, or to stop it when the caller gives up).

        A call claiming a resource that a worker on another node holds is forwarded there once admitted
        (``placement.py``); one that no live worker owns is refused, or waits ``wait_owner_s`` for one.
        ``placed``: this is the node the call was forwarded to (it runs here). ``journal``: the caller's
        own writes, made in the transactions that claim and end an inline call with a given execution id
        (``inline.Journal``); never made for any other call.

        Nothing here blocks the event loop: store writes, file writes and checks run in threads.
        """
        started = time.monotonic()
        given = execution_id is not None
        check_caller(caller)
        check_origin(origin)
        if task_id in OWN:
            return await self._own_call(task_id, params, caller, grants, origin, execution_id, started)
        if execution_id is None:
            execution_id = new_execution_id()
        else:
            check_execution_id(execution_id)
            if not self.inline(task_id, caller, grants):  # an inline call claims its id as it starts
                known = await off_loop(self.store.get, execution_id)
                if known is not None:
                    return await self._attach(known, task_id, on_start)
        where = Where(origin=origin, step_id=step_id, given=given)
        verdict = await self._gate.admit(task_id, params, caller, confirmation, grants)
        if not isinstance(verdict, Admitted):
            refusal = verdict.result(execution_id, started)
            return await record_refusal(
                self.store, refusal, caller=caller, params=params, detach=detach, where=where
            )
        if placed and verdict.spec.resources:  # forwarded here: it runs only while this executor holds them
            lost = await off_loop(self.placement.missing, verdict.spec.resources)
            if lost:
                found = Placed("nobody", lost[0], f"{', '.join(lost)} is no longer held by this worker")
                return await self._elsewhere(found, verdict, execution_id, started, caller, detach, where,
                                             on_start, 0.0)  # fmt: skip
        if verdict.spec.resources and not placed:
            found = await off_loop(self.placement.decide, verdict.spec.resources)
            if found.verdict != "here":
                return await self._elsewhere(found, verdict, execution_id, started, caller, detach, where,
                                             on_start, wait_owner_s)  # fmt: skip
        return await self._run_here(verdict, execution_id, caller, where, started, detach, on_start, journal)

    async def _run_here(
        self,
        verdict: Admitted,
        execution_id: str,
        caller: str,
        where: Where,
        started: float,
        detach: bool,
        on_start: Callable[[str], None] | None,
        journal: Journal | None = None,
    ) -> TaskResult:
        """An admitted call that runs on this node: inline, or in a worker of its own."""
        if verdict.spec.isolation is Isolation.INLINE:
            return await InlineRun(
                home=self.home,
                store=self.store,
                jobs=self.jobs,
                admitted=verdict,
                execution_id=execution_id,
                caller=caller,
                where=where,
                started=started,
                attach=lambda known: self._attach(known, verdict.spec.task_id, None),
                journal=journal,
            ).run()
        # A holder's detached job on a resource it holds for the installation must not outlive the holder:
        # its hold lapses when the holder dies, and another host's worker may take the resource.
        tied = False
        if detach and self.placement.holds is not None and verdict.spec.resources:
            tied = bool(await off_loop(self.placement.owned, verdict.spec.resources))
        return await Launch(
            home=self.home,
            registry=self.registry,
            settings=self.settings,
            store=self.store,
            jobs=self.jobs,
            records=self._records,
            spawner=lambda: self.spawner,
            key=self._key,
            me=self._me,
            import_path=self._import_path,
            admitted=verdict,
            execution_id=execution_id,
            caller=caller,
            where=where,
            detach=detach,
            tied=tied,
            on_start=on_start,
            attach=lambda known: self._attach(known, verdict.spec.task_id, on_start),
        ).run()

    async def _elsewhere(
        self,
        found: Placed,
        verdict: Admitted,
        execution_id: str,
        started: float,
        caller: str,
        detach: bool,
        where: Where,
        on_start: Callable[[str], None] | None,
        wait_owner_s: float,
    ) -> TaskResult:
        """A call whose resource is owned on another node: forwarded to its holder, or refused."""
        if found.verdict == "nobody" and wait_owner_s > 0:
            found = await self.placement.where(verdict.spec.resources, wait_owner_s)
            if found.verdict == "here":
                return await self.execute(
                    verdict.spec.task_id, verdict.clean, caller=caller, grants=verdict.grants,
                    confirmation=verdict.consent, detach=detach, origin=where.origin, step_id=where.step_id,
                    execution_id=execution_id, on_start=on_start, placed=True,
                )  # fmt: skip
        forwarder = self.placement.forwarder
        if found.verdict == "forward" and forwarder is not None:
            call = Forwarded(
                task_id=verdict.spec.task_id, params=verdict.clean, caller=caller, execution_id=execution_id,
                grants=verdict.grants.to_json() if verdict.grants is not None else None,
                confirmation=asdict(verdict.consent) if verdict.consent is not None else None,
                detach=detach, origin=where.origin, step_id=where.step_id, from_node=self.placement.node,
            )  # fmt: skip
            return await forwarder(call, found.resource, on_start)
        message = found.message or (
            f"{found.resource} is held by a worker on another node, and this process cannot hand calls "
            "to it (run it from a tether worker, tether serve, or the CLI of an installation on PostgreSQL)"
        )
        refusal = TaskResult(
            task_id=verdict.spec.task_id, execution_id=execution_id, status=TaskStatus.REJECTED,
            message=message, duration_seconds=round(time.monotonic() - started, 6),
            data={"resource": found.resource, "placement": found.verdict},
        )  # fmt: skip
        return await record_refusal(
            self.store, refusal, caller=caller, params=verdict.clean, detach=detach, where=where
        )

    def claim_in(
        self,
        conn: Any,
        task_id: str,
        params: Mapping[str, Any] | None,
        *,
        caller: str,
        grants: Grants | None,
        origin: str,
        step_id: str,
        execution_id: str,
        started: Callable[[Any], None],
    ) -> Claim | None:
        """Admit an inline call and claim its id in the caller's write transaction ``conn`` (with its
        ``started(conn)``), for ``run_claimed`` to run once that commits (or ``give_up``). None, nothing
        written, when it needs what only ``execute`` does (``jobs.*``, a check off this thread, consent,
        a resource), fails a check, or its id is on record: ``execute`` says why, or attaches."""
        if task_id in OWN:
            return None
        try:
            check_caller(caller)
            check_origin(origin)
            check_execution_id(execution_id)
            admitted = self._gate.admit_at_once(task_id, params, caller, grants)
        except Exception:  # ``execute`` meets the same call, and says what is wrong with it
            admitted = None
        if admitted is None or admitted.spec.isolation is not Isolation.INLINE:
            return None
        where = Where(origin=origin, step_id=step_id, given=True)
        claim = claimed_in(self.store, conn, Claim(admitted, execution_id, caller, where), started)
        if claim is not None:
            self._claims[execution_id] = claim  # kept while its caller holds it
        return claim

    async def run_claimed(self, claim: Claim, journal: Journal) -> TaskResult:
        """Run an inline call ``claim_in`` claimed, once, after its transaction committed."""
        if self._claims.pop(claim.execution_id, None) is not claim:
            raise ConfigError(f"{claim.execution_id} is not a claim of this executor, or it ran already")
        spec = claim.admitted.spec
        return await InlineRun(
            home=self.home, store=self.store, jobs=self.jobs, admitted=claim.admitted,
            execution_id=claim.execution_id, caller=claim.caller, where=claim.where,
            started=time.monotonic(), attach=lambda known: self._attach(known, spec.task_id, None),
            journal=journal, claimed=True,
        ).run()  # fmt: skip

    def give_up(self, claim: Claim) -> None:
        """A claim that will not run (its caller was cancelled): its job ends never started."""
        if self._claims.pop(claim.execution_id, None) is claim:
            self.store.transition(given_up(claim))

    def inline(self, task_id: object, caller: str, grants: Grants | None) -> bool:
        """Whether a call of ``task_id`` by ``caller`` would run inside this process (an inline task)."""
        spec = self.registry.get(task_id, caller, grants) if isinstance(task_id, str) else None
        return spec is not None and spec.isolation is Isolation.INLINE

    async def _attach(
        self, record: JobRecord, task_id: str, on_start: Callable[[str], None] | None
    ) -> TaskResult:
        """A second call with a known execution id: the recorded result, or the live job followed."""
        if record.task_id != task_id:
            raise ConfigError(
                f"execution id {record.execution_id!r} already belongs to {record.task_id!r}, not {task_id!r}"
            )
        eid = record.execution_id
        record = await off_loop(self.jobs.reconcile, eid)
        if not record.terminal and on_start is not None:
            on_start(eid)
        # Another process may still be starting it, or it runs: follow it to its outcome or handshake.
        while not (record.terminal or (record.background and record.status is TaskStatus.RUNNING)):
            await asyncio.sleep(POLL_S)
            record = await off_loop(self.jobs.reconcile, eid)
        described = await off_loop(self.jobs.describe, record)
        return described.with_data(attached=True)

    # -- control --------------------------------------------------------------------------------

    def _visible(
        self, execution_id: str, caller: str, origin: str | None, grants: Grants | None = None
    ) -> bool:
        """Whether ``caller`` may see the job: a person acting directly sees every job of the home
        (contract 9: any process can stop any job); any other caller only jobs of tasks exposed to it
        (and within its ``grants``), and only ``origin``'s when it scopes itself to one."""
        record = self.store.get(execution_id) if isinstance(execution_id, str) else None
        if record is None:
            return False
        if caller in self.settings.operator_callers:
            return origin is None or record.origin == origin
        return self.registry.get(record.task_id, caller, grants) is not None and (
            origin is None or record.origin == origin
        )

    async def _own_call(
        self,
        task_id: str,
        params: Mapping[str, Any] | None,
        caller: str,
        grants: Grants | None,
        origin: str | None,
        execution_id: str | None,
        started: float,
    ) -> TaskResult:
        """A task the executor answers itself (``tasks/spec.py``'s ``OWN``), admitted like any.
        ``jobs.status`` / ``jobs.stop`` look at or stop a job (within ``origin``'s jobs when given) and
        are no job of their own; ``memory.remember`` notes a fact for the agent of the thread ``origin``
        names, on record as a job (once per execution id: a replayed step finds what it did)."""
        if task_id not in CONTROL and execution_id is not None:
            known = await off_loop(self.store.get, execution_id)
            if known is not None:
                return known.to_result()
        verdict = await self._gate.admit(task_id, params, caller, None, grants)
        if not isinstance(verdict, Admitted):
            return verdict.result(execution_id or "", started)
        if task_id in CONTROL:
            action: Action = "status" if task_id == JOBS_STATUS else "stop"
            target = str(verdict.clean["execution_id"])
            return await self.control(target, action, caller=caller, origin=origin, grants=grants)
        thread = origin.removeprefix("thread:") if origin and origin.startswith("thread:") else None
        runtime = self.runtime
        try:
            noted = await off_loop(
                note_fact, runtime.threads, runtime.agents, runtime.memories, verdict.clean["fact"], thread
            )
            status, message = TaskStatus.COMPLETED, f"noted: {noted}"
        except ConfigError as exc:
            status, message = TaskStatus.REJECTED, exc.message
        result = TaskResult(
            task_id=task_id,
            execution_id=execution_id or new_execution_id(),
            status=status,
            message=message,
            duration_seconds=round(time.monotonic() - started, 6),
        )
        where = Where(origin=origin, step_id=None, given=execution_id is not None)
        return await record_refusal(  # (any ended result goes on record this way)
            self.store, result, caller=caller, params=verdict.clean, detach=False, where=where
        )

    MIN_PREFIX = 4

    def _by_prefix(
        self, prefix: object, caller: str, origin: str | None, grants: Grants | None
    ) -> str | list[str]:
        """The one visible job whose id starts with ``prefix``, else the visible ones that do."""
        if not isinstance(prefix, str) or len(prefix) < self.MIN_PREFIX or len(prefix) >= 19:
            return []
        ids = self.store.ids_with_prefix(prefix, 5)
        visible = [i for i in ids if self._visible(i, caller, origin, grants)]
        return visible[0] if len(visible) == 1 else visible

    async def control(
        self,
        execution_id: str,
        action: Action,
        *,
        caller: str,
        origin: str | None = None,
        reason: str | None = None,
        grants: Grants | None = None,
    ) -> TaskResult:
        """Status, stop or wait for one job, as ``caller`` sees it (``origin``: only jobs it started;
        ``grants``: only jobs of tasks within an agent's grants).

        A job the caller may not see is answered exactly like one that does not exist: ``not_found``.
        """
        if action not in ACTIONS:
            raise ConfigError(f"unknown job action {action!r}; actions: {', '.join(ACTIONS)}")
        check_caller(caller)
        if not await off_loop(self._visible, execution_id, caller, origin, grants):
            shown = clip(str(execution_id), 80)
            found = await off_loop(self._by_prefix, execution_id, caller, origin, grants)
            if isinstance(found, str):
                execution_id = found  # a unique prefix of a job this caller sees
            else:
                more = f"; it starts {len(found)} jobs: {', '.join(found)}" if found else ""
                return TaskResult(
                    task_id="unknown",
                    execution_id=shown,
                    status=TaskStatus.NOT_FOUND,
                    message=f"no job {shown!r} is visible to {caller}{more}",
                )
        if action == "status":
            return await off_loop(self.jobs.status, execution_id)
        if action == "wait":
            return await self.jobs.wait(execution_id)
        return await self.jobs.stop(execution_id, reason=reason or f"asked by {caller}")

    def jobs_for(
        self,
        caller: str,
        *,
        origin: str | None = None,
        active: bool = False,
        limit: int = 50,
        before: str | None = None,
        grants: Grants | None = None,
    ) -> list[TaskResult]:
        """The jobs ``caller`` may see (see ``control``), newest first; ``before`` pages on."""
        task_ids = None
        if caller not in self.settings.operator_callers:
            task_ids = [spec.task_id for spec in self.registry.for_caller(caller, grants)]
        return self.jobs.list(active=active, limit=limit, origin=origin, task_ids=task_ids, before=before)


def import_root(ref: str) -> str | None:
    """The sys.path entry the registry's module was imported from (``/work`` for ``/work/myapp/tasks.py``
    as ``myapp.tasks``), or None when it is not a file of its own."""
    module = sys.modules.get(ref.partition(":")[0])
    where = getattr(module, "__file__", None)
    if not where:
        return None
    path = Path(where).resolve()
    levels = ref.partition(":")[0].count(".") + (1 if path.name == "__init__.py" else 0)
    try:
        return str(path.parents[levels])
    except IndexError:
        return None
