"""Per-call danger (``destructive_if``) and availability (``available``), at the executor and the worker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.policy_registry import MARKER, NoteParams, registry
from tether.agent.surface import ToolSurface
from tether.errors import RegistryError
from tether.execution.executor import Executor
from tether.tasks.confirm import Confirmation, call_digest
from tether.tasks.result import TaskStatus
from tether.tasks.spec import TaskSpec


def test_a_flagged_call_needs_the_person_and_the_plain_call_does_not(
    make_executor: Callable[..., Executor], home: Path
) -> None:
    executor = make_executor(registry=registry)
    plain = asyncio.run(executor.execute("notes.write", {"name": "a"}, caller="agent"))
    assert plain.status is TaskStatus.COMPLETED, plain
    refused = asyncio.run(executor.execute("notes.write", {"name": "a", "overwrite": True}, caller="agent"))
    assert refused.status is TaskStatus.REJECTED
    assert refused.data["needs_confirmation"] and refused.data["danger"] == "destructive"
    assert "destructive" in refused.message
    assert (home / "a.note").read_text() == plain.execution_id  # nothing was overwritten
    # A typed command is not enough either: destructive needs a confirmation even for a direct caller.
    direct = asyncio.run(executor.execute("notes.write", {"name": "a", "overwrite": True}, caller="cli"))
    assert direct.status is TaskStatus.REJECTED
    consent = executor.confirm(
        "notes.write", {"name": "a", "overwrite": True}, caller="agent", source="person:test"
    )
    done = asyncio.run(
        executor.execute(
            "notes.write", {"name": "a", "overwrite": True}, caller="agent", confirmation=consent
        )
    )
    assert done.status is TaskStatus.COMPLETED, done
    assert (home / "a.note").read_text() == done.execution_id


def test_the_worker_checks_the_flag_too(make_executor: Callable[..., Executor]) -> None:
    # A confirmation for the plain call does not cover the flagged one.
    executor = make_executor(registry=registry)
    wrong = Confirmation(
        task_id="notes.write",
        digest=call_digest("notes.write", {"name": "b", "overwrite": False}),
        source="person:test",
    )
    result = asyncio.run(
        executor.execute("notes.write", {"name": "b", "overwrite": True}, caller="agent", confirmation=wrong)
    )
    assert result.status is TaskStatus.REJECTED and result.data.get("confirmation_mismatch")


def test_an_unavailable_task_is_refused_with_its_reason_and_left_off_the_surface(
    make_executor: Callable[..., Executor], home: Path
) -> None:
    executor = make_executor(registry=registry)
    result = asyncio.run(executor.execute("notes.ping", caller="cli"))
    assert result.status is TaskStatus.REJECTED and result.data["unavailable"]
    assert MARKER in result.message
    surface = ToolSurface(registry, "agent", home)
    assert [t.name for t in surface.business] == ["notes__write"]
    assert MARKER in surface.unavailable["notes__ping"]
    assert "DESTRUCTIVE" in surface.business[0].description
    (home / MARKER).write_text("yes")
    assert asyncio.run(executor.execute("notes.ping", caller="cli")).status is TaskStatus.COMPLETED
    assert "notes__ping" in [t.name for t in ToolSurface(registry, "agent", home).business]


def test_a_flag_that_is_not_a_parameter_is_a_registry_error() -> None:
    with pytest.raises(RegistryError, match="not a parameter"):
        TaskSpec(task_id="x.y", handler="a.b:c", params=NoteParams, destructive_if=("force",))
    with pytest.raises(RegistryError, match="available"):
        TaskSpec(task_id="x.y", handler="a.b:c", available="not a path")
