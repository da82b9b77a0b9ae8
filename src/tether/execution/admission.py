"""Admission: the checks a call passes, in order, before anything runs (``Executor.execute``'s steps 1-7).

Ids first: a fresh execution id, or the caller's own (``execution_id_for`` derives one from a step), in
a form that can name a folder. Then the call itself: the spec must exist and be exposed to the caller
(unknown and unexposed are both ``not_found``), the params must validate, no live job may hold one of its
resources (the holder is named only to a caller that may see it), its preconditions must hold (checked in
a thread, off the event loop), and the danger policy comes **last**, so a person is only ever asked about
a call that would otherwise run. ``admit`` answers with what the run needs (``Admitted``) or why not
(``Refusal``); every refusal becomes a ``TaskResult`` and a job row (``record_refusal``), never an
exception. Misuse by the program (a caller or origin that is not a name) is a ``ConfigError``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tether.config import Settings
from tether.errors import ConfigError, RunEnded, StoreError, ToolRejected
from tether.execution import lock
from tether.execution.protocol import bounded, clip
from tether.execution.records import off_loop
from tether.store.jobs import JobStore
from tether.tasks.confirm import Confirmation, call_digest
from tether.tasks.grants import Grants
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import NAME_RE, Danger, Registry, TaskSpec
from tether.tasks.validation import MAX_PARAMS_BYTES, validate_params

log = logging.getLogger("tether.executor")

ORIGIN_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:/-]{0,199}$")
MAX_REFUSAL_CHARS = 2_000
# Execution ids name a folder in the home: letters, digits, '_', '.', '-' (never "..").
EXECUTION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def new_execution_id() -> str:
    """Sortable by start time (millisecond hex prefix), unique by 32 random bits."""
    return f"{time.time_ns() // 1_000_000:011x}{secrets.token_hex(4)}"


def execution_id_for(*parts: str) -> str:
    """A deterministic execution id for a step (thread, turn, index; later run, task, attempt): the same
    parts always name the same execution, so running the step again never starts a second worker."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return digest[:19]


def check_caller(caller: object) -> None:
    if not isinstance(caller, str) or not NAME_RE.match(caller):
        raise ConfigError(f"caller must be a name such as 'agent', 'cli' or 'mcp', got {caller!r}")


def check_origin(origin: object) -> None:
    if origin is not None and not (isinstance(origin, str) and ORIGIN_RE.match(origin)):
        raise ConfigError("origin must be a short name such as 'thread:th-1234' (at most 200 characters)")


def check_execution_id(execution_id: object) -> None:
    if not (isinstance(execution_id, str) and EXECUTION_ID_RE.match(execution_id)) or ".." in execution_id:
        raise ConfigError(
            f"execution_id must be letters, digits, '_', '.' or '-' (at most 128), got {execution_id!r}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Where:
    """Where an execution comes from, as it goes on record."""

    origin: str | None
    step_id: str | None
    given: bool  # the caller chose the execution id

    @property
    def record(self) -> dict[str, Any]:
        return {"origin": self.origin, "step_id": self.step_id}


@dataclass(frozen=True, slots=True, kw_only=True)
class Admitted:
    """A call that passed every check: what its run needs."""

    spec: TaskSpec
    params: BaseModel | None  # validated, as the handler receives them
    clean: dict[str, Any]  # the same, as JSON: what goes on record and into the request
    consent: Confirmation | None  # the confirmation it runs under; None for a safe call
    grants: Grants | None = None  # the agent's grants it was admitted under (re-checked by the worker)


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """Why a call does not run. ``task_id`` is as it goes on record (an unknown one is clipped)."""

    task_id: str
    status: TaskStatus
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def result(self, execution_id: str, started: float) -> TaskResult:
        return bounded(
            TaskResult(
                task_id=self.task_id,
                execution_id=execution_id,
                status=self.status,
                message=clip(self.message, MAX_REFUSAL_CHARS),
                duration_seconds=round(time.monotonic() - started, 6),
                data=self.data,
            )
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    """The checks of one executor: its registry, home and settings, and who may see which job."""

    registry: Registry
    home: Path
    settings: Settings
    # (execution id, caller, origin, grants): may the caller see the job
    visible: Callable[[str, str, str | None, Grants | None], bool]

    async def admit(
        self,
        task_id: object,
        params: Mapping[str, Any] | None,
        caller: str,
        confirmation: Confirmation | None,
        grants: Grants | None = None,
    ) -> Admitted | Refusal:
        """Steps 2-7 of ``execute``, in order; the first that fails is the answer. A task outside the
        caller's ``grants`` is ``not_found``, like one that does not exist."""
        spec = self.registry.get(task_id, caller, grants) if isinstance(task_id, str) else None
        if spec is None:
            shown = clip(str(task_id), 200)
            similar = self.registry.similar(shown, caller, grants=grants)
            hint = f"; did you mean {', '.join(similar)}?" if similar else ""
            message = f"no task {shown!r} is available to {caller}{hint}"
            return Refusal(
                task_id=shown, status=TaskStatus.NOT_FOUND, message=message, data={"similar": similar}
            )
        try:
            validated = validate_params(spec, params)
        except ToolRejected as exc:
            return self._refuse(spec, TaskStatus.REJECTED, exc.message, exc.data)
        clean = {} if validated is None else validated.model_dump(mode="json")
        refusal = await self._busy(spec, caller, grants) or await self._unmet(spec)
        if refusal is not None:
            return refusal
        consent = self.consent(spec, clean, caller, confirmation)
        if isinstance(consent, dict):
            mismatch = (
                " (the confirmation given was for another call)"
                if consent.get("confirmation_mismatch")
                else ""
            )
            message = (
                f"{spec.task_id} is {consent['danger']}: it runs only after the person confirms this "
                f"exact call{mismatch}"
            )
            return self._refuse(spec, TaskStatus.REJECTED, message, consent)
        return Admitted(spec=spec, params=validated, clean=clean, consent=consent, grants=grants)

    def admit_at_once(
        self, task_id: str, params: Mapping[str, Any] | None, caller: str, grants: Grants | None
    ) -> Admitted | None:
        """``admit`` for a call whose checks need nothing but its spec and its arguments (no resource to
        look at, no requirement or probe to run, no consent to ask), done on the caller's thread: the
        call admitted, or None when it needs any other check or fails one (``admit`` says why)."""
        spec = self.registry.get(task_id, caller, grants)
        if spec is None or spec.resources or spec.requires or spec.available is not None:
            return None
        try:
            validated = validate_params(spec, params)
        except ToolRejected:
            return None
        clean = {} if validated is None else validated.model_dump(mode="json")
        if self.consent(spec, clean, caller, None) is not None:
            return None
        return Admitted(spec=spec, params=validated, clean=clean, consent=None, grants=grants)

    @staticmethod
    def _refuse(
        spec: TaskSpec, status: TaskStatus, message: str, data: dict[str, Any] | None = None
    ) -> Refusal:
        return Refusal(task_id=spec.task_id, status=status, message=message, data=data or {})

    async def _busy(self, spec: TaskSpec, caller: str, grants: Grants | None) -> Refusal | None:
        """One active job per resource: the live holder of the lock, named to a caller that may see it."""
        held = await off_loop(lock.holder, self.home, spec.resources) if spec.resources else None
        if held is None:
            return None
        resource, owner = held
        holder = str(owner.get("execution_id", "unknown"))
        if caller in self.settings.operator_callers or await off_loop(
            self.visible, holder, caller, None, grants
        ):
            who = f"execution {holder} ({owner.get('task_id', '?')})"
            data = {"blocked_by": holder, "blocking_task": owner.get("task_id"), "resource": resource}
        else:  # a job this caller may not see is not named to it
            who, data = "a job you cannot see", {"resource": resource}
        message = f"resource {resource} is in use by {who}; stop it or wait for it to end"
        return self._refuse(spec, TaskStatus.REJECTED, message, data)

    async def _unmet(self, spec: TaskSpec) -> Refusal | None:
        """The environment pre-check: the task's ``requires``, then its ``available`` probe."""
        try:
            unmet = await off_loop(self.registry.unmet, spec, self.home) if spec.requires else None
        except Exception as exc:
            message = f"precondition check failed: {type(exc).__name__}: {exc}"
            return self._refuse(spec, TaskStatus.FAILED, message)
        if unmet:
            return self._refuse(spec, TaskStatus.REJECTED, unmet, {"unmet": list(spec.requires)})
        if spec.available is not None:
            missing = await off_loop(spec.unavailable, self.home)
            if missing:
                return self._refuse(spec, TaskStatus.REJECTED, missing, {"unavailable": True})
        return None

    def consent(
        self, spec: TaskSpec, clean: dict[str, Any], caller: str, confirmation: Confirmation | None
    ) -> Confirmation | dict[str, Any] | None:
        """The confirmation this call runs under (None for a safe task), or the refusal's data."""
        danger = spec.danger_for(clean)
        if danger is Danger.SAFE:
            return None
        digest = call_digest(spec.task_id, clean)
        if confirmation is not None and confirmation.matches(spec.task_id, digest):
            return confirmation
        if confirmation is None and danger is Danger.CAUTION and caller in self.settings.direct_callers:
            # A person typing the command is consenting to exactly that command.
            return Confirmation(task_id=spec.task_id, digest=digest, source=f"direct:{caller}")
        data: dict[str, Any] = {
            "needs_confirmation": True,
            "danger": danger.value,
            "params": clean,
            "digest": digest,
        }
        if confirmation is not None:
            data["confirmation_mismatch"] = True
        return data


def nothing_started(task_id: str, execution_id: str, exc: StoreError) -> TaskResult:
    """A call the store would not put on record: refused when its run had ended (``RunEnded``: the
    caller puts the refusal on record), failed when the store failed. It never started either way."""
    ended = isinstance(exc, RunEnded)
    return TaskResult(
        task_id=task_id, execution_id=execution_id,
        status=TaskStatus.REJECTED if ended else TaskStatus.FAILED,
        message=f"nothing was started: {exc.message}",
        data={"run_ended": True, "never_started": True} if ended else {"not_on_record": exc.message},
    )  # fmt: skip


async def record_refusal(
    store: JobStore,
    result: TaskResult,
    *,
    caller: str,
    params: object,
    detach: bool,
    where: Where,
) -> TaskResult:
    """Put a refusal on record; a twin call's record wins, and a store that cannot take it does not
    turn the refusal into an exception (the result says so)."""
    try:
        inserted = await off_loop(
            store.insert,
            result,
            caller=caller,
            params=on_record(params),
            detached=detach,
            if_absent=where.given,
            **where.record,
        )
    except StoreError as exc:
        log.warning("could not record %s: %s", result.execution_id, exc.message)
        return result.with_data(not_on_record=exc.message)
    if not inserted:
        known = await off_loop(store.get, result.execution_id)
        assert known is not None
        return known.to_result()
    return result


def on_record(params: object) -> dict[str, Any]:
    """What a refused call's params look like on record: as given when small, else a note of their size."""
    try:
        encoded = json.dumps(params if params is not None else {}, ensure_ascii=False, default=repr)
    except (ValueError, RecursionError):
        return {"_omitted": "params that are not JSON"}
    if len(encoded) > MAX_PARAMS_BYTES:
        return {"_omitted": f"params of {len(encoded)} characters, over the limit"}
    value = json.loads(encoded)
    return value if isinstance(value, dict) else {"_raw": clip(encoded, 200)}
