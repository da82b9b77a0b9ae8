"""Tasks for supervisor tests: each records what it did, by its own clock, in a ledger in the home.

``ledger.jsonl`` gets one line per *effect* (the moment a task acts): a test counts lines to prove no
step ran twice, and reads the begin/end times to prove two tasks on one resource never overlapped.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from tether import Registry, TaskSpec
from tether.tasks.context import TaskContext
from tether.tasks.spec import Danger, Isolation

H = "tests.support.flowkit:"
EVERY = frozenset({"agent", "cli", "mcp"})


class Work(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    seconds: Annotated[float, Field(ge=0, le=60)] = 0.0
    fail_first: Annotated[int, Field(ge=0, le=20)] = 0
    # Hold on (after ``seconds``) until a file of this name exists in the home: a test decides when.
    until_file: Annotated[str | None, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] = None


def _ledger(home: Path) -> Path:
    return home / "ledger.jsonl"


def _write(home: Path, entry: dict[str, object]) -> None:
    line = json.dumps(entry) + "\n"
    fd = os.open(_ledger(home), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def ledger(home: Path) -> list[dict[str, Any]]:
    path = _ledger(home)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _tries(home: Path, key: str) -> int:
    """How many times ``key`` was tried before (a counter file per key)."""
    path = home / f"tries-{key}"
    n = int(path.read_text()) if path.exists() else 0
    path.write_text(str(n + 1))
    return n


def work(ctx: TaskContext) -> dict[str, object]:
    params = ctx.params
    assert isinstance(params, Work)
    began = time.time()
    print(f"{params.key}: working", flush=True)  # what its log's readers see
    if _tries(ctx.home, params.key) < params.fail_first:
        raise RuntimeError(f"{params.key}: the service is not ready yet (transient)")
    if params.seconds:
        ctx.sleep(params.seconds)
        ctx.check_stop()
    while params.until_file and not (ctx.home / params.until_file).exists():
        ctx.sleep(0.05)
        ctx.check_stop()
    _write(
        ctx.home,
        {
            "key": params.key,
            "task": ctx.task_id,
            "eid": ctx.execution_id,
            "began": began,
            "ended": time.time(),
            "pid": os.getpid(),
        },
    )
    return {"key": params.key, "value": len(params.key)}


def always_fails(ctx: TaskContext) -> None:
    raise RuntimeError("the disk is full (evidence: 0 bytes free on /data)")


def proposes(ctx: TaskContext) -> dict[str, object]:
    params = ctx.params
    assert isinstance(params, Work)
    _write(
        ctx.home,
        {
            "key": params.key,
            "task": ctx.task_id,
            "eid": ctx.execution_id,
            "began": time.time(),
            "ended": time.time(),
            "pid": os.getpid(),
        },
    )
    return {
        "propose": [
            {
                "id": f"test-{params.key}",
                "description": "test what was written",
                "call": {"task": "f.safe", "args": {"key": f"test-{params.key}"}},
            },
        ]
    }


flows = Registry(ref="tests.support.flowkit:flows")
flows.add(
    TaskSpec(
        task_id="f.safe",
        handler=H + "work",
        params=Work,
        description="An idempotent step.",
        idempotent=True,
        resources=(),
        exposed_to=EVERY,
    )
)
flows.add(
    TaskSpec(
        task_id="f.once",
        handler=H + "work",
        params=Work,
        description="A step that must run once.",
        resources=(),
        exposed_to=EVERY,
    )
)
flows.add(
    TaskSpec(
        task_id="f.arm",
        handler=H + "work",
        params=Work,
        description="Moves the one robot arm.",
        resources=("arm",),
        exposed_to=EVERY,
    )
)
flows.add(
    TaskSpec(
        task_id="f.wipe",
        handler=H + "work",
        params=Work,
        description="Wipes a disk.",
        danger=Danger.DESTRUCTIVE,
        resources=(),
        exposed_to=EVERY,
    )
)
flows.add(
    TaskSpec(
        task_id="f.broken",
        handler=H + "always_fails",
        description="Always fails.",
        resources=(),
        exposed_to=EVERY,
    )
)
flows.add(
    TaskSpec(
        task_id="f.propose",
        handler=H + "proposes",
        params=Work,
        description="Writes something and proposes to test it.",
        resources=(),
        exposed_to=EVERY,
    )
)
flows.add(
    TaskSpec(
        task_id="f.inline_once",
        handler=H + "work",
        params=Work,
        description="A step that must run once, inside the executor's own process.",
        resources=(),
        exposed_to=EVERY,
        isolation=Isolation.INLINE,
    )
)
# The second name is the same task: a fault point can single out one of two calls of a wave.
for name in ("f.inline_safe", "f.inline_safe_too"):
    flows.add(
        TaskSpec(
            task_id=name,
            handler=H + "work",
            params=Work,
            description="An idempotent step, inside the executor's own process.",
            idempotent=True,
            resources=(),
            exposed_to=EVERY,
            isolation=Isolation.INLINE,
        )
    )
