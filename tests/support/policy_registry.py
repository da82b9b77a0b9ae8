"""A registry whose tasks exercise per-call danger (``destructive_if``) and availability (``available``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tether.tasks.context import TaskContext
from tether.tasks.spec import AGENT, CLI, Registry, TaskSpec

MARKER = "ready.txt"


class NoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    overwrite: bool = False


def write_note(ctx: TaskContext) -> str:
    params = ctx.params
    assert isinstance(params, NoteParams)
    target = ctx.home / f"{params.name}.note"
    with target.open("w" if params.overwrite else "x", encoding="utf-8") as out:
        out.write(ctx.execution_id)
    return f"wrote {target.name}"


def ready(home: Path) -> str | None:
    return None if (home / MARKER).exists() else f"not set up: create {MARKER} in the home first"


def ping(ctx: TaskContext) -> str:
    return "pong"


registry = Registry(ref="tests.support.policy_registry:registry")
registry.add(
    TaskSpec(
        task_id="notes.write",
        handler="tests.support.policy_registry:write_note",
        params=NoteParams,
        exposed_to={AGENT, CLI},
        resources=(),
        destructive_if=("overwrite",),
    )
)
registry.add(
    TaskSpec(
        task_id="notes.ping",
        handler="tests.support.policy_registry:ping",
        exposed_to={AGENT, CLI},
        resources=(),
        available="tests.support.policy_registry:ready",
    )
)
