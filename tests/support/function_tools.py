"""Tasks written as one function each (``@registry.task``), for tests/tasks/test_function_tasks.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from tether import Catalog, Registry, TaskContext, TaskFailed

registry = Registry(ref="tests.support.function_tools:registry")
ROOMS = Catalog("room", {"kitchen": ("厨房",), "garage": ("车库",)})
# Imported by ``clean``'s body only: never by the process that starts it.
HEAVY = "tests.support.heavy_for_tools"


@registry.task(
    "robot.clean", catalogs={"room": ROOMS}, labels={"room": {"zh": "房间"}}, aliases=("打扫", "vacuum"),
    resources=("robot",), timeout_s=600,
)  # fmt: skip
def clean(ctx: TaskContext, room: str, passes: Annotated[int, Field(ge=1, le=5)] = 1) -> tuple[str, dict]:
    """Vacuum one room.

    Args:
        room: the room to clean
        passes: how many times to go over it,
            once by default
    """
    import importlib

    importlib.import_module(HEAVY)
    for n in range(passes):
        ctx.progress(n / passes, f"pass {n + 1}")
    return "clean", {"room": room, "passes": passes, "heavy_here": HEAVY in sys.modules}


@registry.task(danger="destructive", resources=())
def wipe(folder: Path, mode: Literal["quick", "full"] = "quick") -> str:
    """Wipe a folder (it only says so)."""
    return f"wiped {folder.name} ({mode}, {type(folder).__name__})"


@registry.task("robot.patrol", background=True, resources=("robot",))
def patrol(ctx: TaskContext, rounds: int = 1000) -> str:
    """Walk the house until stopped."""
    for n in range(rounds):
        ctx.progress(None, f"round {n + 1}")
        if not ctx.sleep(0.05):
            ctx.check_stop()
    return "patrolled"


@registry.task(resources=(), isolation="inline")
async def ping(ctx, word: str = "pong") -> dict:  # an unannotated ctx is the context too
    """Answer at once, in the executor's own process."""
    if word == "fail":
        raise TaskFailed("asked to fail")
    return {"word": word, "task": ctx.task_id}
