"""Tasks that exist only to break the execution core on purpose. Workers import this module by ref."""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tether.tasks.catalog import InCatalog
from tether.tasks.context import TaskContext
from tether.tasks.spec import AGENT, CLI, Danger, Isolation, Registry, TaskSpec
from tether.toolkits.demo.catalog import INSTANCE_NAMES, INSTANCE_TYPES

REF = "tests.support.registry:registry"
EVERY = frozenset({AGENT, CLI})
H = "tests.support.registry:"
PARENT_PID_FILE = "parent.pid"


def dies_in_worker(home: Path) -> str | None:
    """Passes in the test process (the parent), kills the worker before its handshake."""
    parent = int((home / PARENT_PID_FILE).read_text())
    if os.getpid() != parent:
        os._exit(7)
    return None


def hangs_in_worker(home: Path) -> str | None:
    parent = int((home / PARENT_PID_FILE).read_text())
    if os.getpid() != parent:
        time.sleep(3600)
    return None


def quick(ctx: TaskContext) -> str:
    time.sleep(random.uniform(0, 0.004))
    return "quick"


def ignores_stop(ctx: TaskContext) -> None:
    ctx.progress(None, "ignoring stop.requested, not SIGINT")
    while True:
        time.sleep(0.02)


def sleeps(ctx: TaskContext) -> str:
    ctx.sleep(60)
    ctx.check_stop()
    return "woke up"


def returns_bad(ctx: TaskContext) -> object:
    return 42


def raises(ctx: TaskContext) -> None:
    raise RuntimeError("boom")


def echo(ctx: TaskContext) -> dict[str, object]:
    assert ctx.params is not None
    return ctx.params.model_dump()


class FuzzParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_type: Annotated[str, InCatalog(catalog=INSTANCE_TYPES)]
    instance_name: Annotated[str, InCatalog(catalog=INSTANCE_NAMES, depends_on="instance_type")]
    attempts: Annotated[int, Field(ge=1, le=99)] = 1


def checks_params(ctx: TaskContext) -> dict[str, object]:
    """Fails loudly if the executor ever let an invalid value through."""
    params = ctx.params
    assert isinstance(params, FuzzParams)
    if params.instance_type not in INSTANCE_TYPES:
        raise AssertionError(f"bad type reached the handler: {params.instance_type!r}")
    if params.instance_name not in INSTANCE_NAMES[params.instance_type]:
        raise AssertionError(f"bad name reached the handler: {params.instance_name!r}")
    if not 1 <= params.attempts <= 99:
        raise AssertionError(f"bad attempts reached the handler: {params.attempts!r}")
    return params.model_dump()


registry = Registry(ref=REF)
registry.precondition("dies", H + "dies_in_worker")
registry.precondition("hangs", H + "hangs_in_worker")
registry.add(
    TaskSpec(
        task_id="t.dies_before_handshake",
        handler=H + "quick",
        requires=("dies",),
        background=True,
        exposed_to=EVERY,
        resources=(),
    )
)
registry.add(
    TaskSpec(
        task_id="t.silent",
        handler=H + "quick",
        requires=("hangs",),
        background=True,
        exposed_to=EVERY,
        resources=(),
    )
)
registry.add(
    TaskSpec(task_id="t.quick_bg", handler=H + "quick", background=True, exposed_to=EVERY, resources=())
)
registry.add(TaskSpec(task_id="t.quick", handler=H + "quick", exposed_to=EVERY, resources=()))
registry.add(
    TaskSpec(task_id="t.ignores_stop", handler=H + "ignores_stop", background=True, exposed_to=EVERY)
)
registry.add(
    TaskSpec(task_id="t.sleeps", handler=H + "sleeps", exposed_to=EVERY, resources=(), timeout_s=0.5)
)
registry.add(TaskSpec(task_id="t.returns_bad", handler=H + "returns_bad", exposed_to=EVERY, resources=()))
registry.add(TaskSpec(task_id="t.raises", handler=H + "raises", exposed_to=EVERY, resources=()))
registry.add(
    TaskSpec(
        task_id="t.missing_handler", handler="tests.support.nowhere:handler", exposed_to=EVERY, resources=()
    )
)
registry.add(TaskSpec(task_id="t.internal", handler=H + "quick", resources=()))
registry.add(
    TaskSpec(
        task_id="t.checks_params",
        handler=H + "checks_params",
        params=FuzzParams,
        exposed_to=EVERY,
        resources=(),
        isolation=Isolation.INLINE,
    )
)
registry.add(
    TaskSpec(task_id="t.echo_process", handler=H + "echo", params=FuzzParams, exposed_to=EVERY, resources=())
)
registry.add(
    TaskSpec(
        task_id="t.hangs_free", handler=H + "ignores_stop", background=True, exposed_to=EVERY, resources=()
    )
)


def waits_for_a_stop_in_worker(home: Path) -> str | None:
    """In the worker: hold the handshake back until some stop was requested (then let it go on)."""
    parent = int((home / PARENT_PID_FILE).read_text())
    if os.getpid() != parent:
        deadline = time.monotonic() + 30
        while not list((home / "executions").glob("*/stop.requested")) and time.monotonic() < deadline:
            time.sleep(0.01)
    return None


def leaves_a_mark(ctx: TaskContext) -> str:
    (ctx.home / "handler-ran").write_text("yes")
    return "ran"


registry.precondition("waits_for_stop", H + "waits_for_a_stop_in_worker")
registry.add(
    TaskSpec(task_id="t.late_handshake", handler=H + "leaves_a_mark", requires=("waits_for_stop",),
             background=True, exposed_to=EVERY, resources=())
)  # fmt: skip


def holds_the_lock(ctx: TaskContext) -> dict[str, object]:
    """Holds its resource for a moment and says when, by its own clock."""
    began = time.time()
    ctx.sleep(0.15)
    return {"began": began, "ended": time.time(), "pid": os.getpid()}


def environment(ctx: TaskContext) -> dict[str, object]:
    return {"names": sorted(os.environ)}


def destroys(ctx: TaskContext) -> str:
    marks = ctx.home / "destroyed"
    marks.write_text(marks.read_text() + "x" if marks.exists() else "x")
    return "destroyed"


def big_result(ctx: TaskContext) -> dict[str, object]:
    return {"blob": "z" * 600_000, "message": "m" * 10_000}


class DestroyParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    what: Annotated[str, Field(max_length=20)] = "everything"


registry.add(TaskSpec(task_id="t.holds_lock", handler=H + "holds_the_lock", exposed_to=EVERY))
registry.add(TaskSpec(task_id="t.environment", handler=H + "environment", exposed_to=EVERY, resources=()))
registry.add(
    TaskSpec(task_id="t.destroys", handler=H + "destroys", params=DestroyParams, exposed_to=EVERY,
             resources=(), danger=Danger.DESTRUCTIVE)
)  # fmt: skip
registry.add(TaskSpec(task_id="t.big_result", handler=H + "big_result", exposed_to=EVERY, resources=()))
registry.add(
    TaskSpec(task_id="t.loops", handler=H + "loops_until_stopped", background=True, exposed_to=EVERY)
)


def loops_until_stopped(ctx: TaskContext) -> None:
    """A background loop that stops cooperatively (holds the automation lock while it runs)."""
    while not ctx.should_stop():
        ctx.progress(None, "looping")
        ctx.sleep(0.05)
    ctx.check_stop()


registry.add(TaskSpec(task_id="t.marks", handler=H + "leaves_a_mark", exposed_to=EVERY))
registry.add(
    TaskSpec(task_id="t.agent_loops", handler=H + "loops_until_stopped", background=True,
             exposed_to=frozenset({AGENT}))
)  # fmt: skip


def marks_and_waits(ctx: TaskContext) -> str:
    """Acts once (a mark), then works for a long while: a kill mid-run leaves the effect behind."""
    marks = ctx.home / "acted"
    marks.write_text(marks.read_text() + "x" if marks.exists() else "x")
    ctx.sleep(60)
    ctx.check_stop()
    return "acted"


def acts_once_then_quick(ctx: TaskContext) -> str:
    """Idempotent: the second run sees the work is done and returns at once."""
    marks = ctx.home / "idem"
    if marks.exists():
        return "already done"
    marks.write_text("x")
    ctx.sleep(60)
    ctx.check_stop()
    return "done"


registry.add(
    TaskSpec(task_id="t.marks_and_waits", handler=H + "marks_and_waits", exposed_to=EVERY, resources=())
)
registry.add(
    TaskSpec(task_id="t.idempotent_work", handler=H + "acts_once_then_quick", exposed_to=EVERY, resources=(),
             idempotent=True)
)  # fmt: skip


def ids(ctx: TaskContext) -> dict[str, object]:
    """Which process ran it, and which process started that one."""
    return {"pid": os.getpid(), "ppid": os.getppid()}


registry.add(TaskSpec(task_id="t.ids", handler=H + "ids", exposed_to=EVERY, resources=()))
registry.add(
    TaskSpec(
        task_id="t.ids_inline", handler=H + "ids", exposed_to=EVERY, resources=(), isolation=Isolation.INLINE
    )
)


def warm_ups(ctx: TaskContext) -> dict[str, object]:
    """How many times the CLI server's warm-up ran in this process's image (None when it was not
    forked from a CLI server), and which process started this one."""
    zygote = sys.modules.get("tether.interfaces.zygote")
    guard = sys.modules.get("tether.interfaces.guard")
    builds = getattr(guard, "builds", None)
    return {"warm_ups": getattr(zygote, "warm_ups", None), "command_builds": builds, "ppid": os.getppid()}


registry.add(
    TaskSpec(
        task_id="t.warm_ups",
        handler=H + "warm_ups",
        exposed_to=EVERY,
        resources=(),
        isolation=Isolation.INLINE,
    )
)


def waits_for_go(ctx: TaskContext) -> str:
    """Says it waits (a mark), then waits until ``<home>/go`` exists or a stop comes."""
    (ctx.home / "waiting").touch()
    while not (ctx.home / "go").exists():
        if not ctx.sleep(0.02):
            ctx.check_stop()
    return "went"


registry.add(TaskSpec(task_id="t.waits_for_go", handler=H + "waits_for_go", exposed_to=EVERY, resources=()))


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x9b31m\u202eevil\r"


def hostile_text(ctx: TaskContext) -> tuple[str, dict[str, object]]:
    """Outside text as a task may bring it back: terminal control sequences everywhere."""
    ctx.log.info("log line %s", HOSTILE)
    ctx.progress(0.5, f"progress {HOSTILE}")
    return f"message {HOSTILE}", {"field": HOSTILE, HOSTILE: "key"}


registry.add(TaskSpec(task_id="t.hostile_text", handler=H + "hostile_text", exposed_to=EVERY, resources=()))


def inline_waits(ctx: TaskContext) -> str:
    """An inline task that looks for a stop while it waits (a cooperative handler)."""
    (ctx.home / "inline-started").touch()
    for _ in range(3000):
        if not ctx.sleep(0.01):
            ctx.check_stop()
    return "waited"


def inline_busy(ctx: TaskContext) -> str:
    """An inline task that never looks for a stop: it works until it is done, within its timeout."""
    (ctx.home / "inline-started").touch()
    while not (ctx.home / "inline-go").exists():
        time.sleep(0.01)
    return "finished its work"


registry.add(
    TaskSpec(task_id="t.inline_waits", handler=H + "inline_waits", exposed_to=EVERY, resources=(),
             isolation=Isolation.INLINE, timeout_s=60)
)  # fmt: skip
registry.add(
    TaskSpec(task_id="t.inline_busy", handler=H + "inline_busy", exposed_to=EVERY, resources=(),
             isolation=Isolation.INLINE, timeout_s=60)
)  # fmt: skip
