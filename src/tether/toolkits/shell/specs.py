"""The shell tasks: ``tether.toolkits.shell.specs:registry`` (and ``add_tasks`` for composing).

``command`` is checked for shape here (the executor's validation) and against the home's allowlist in
the handler, which loads it from settings.toml; each task is ``available`` only when the home
allow-lists a command it can run, and says why not otherwise.

Danger: every call is ``caution`` (a model asking to run a command asks the person first; a person
typing it consents by typing). A command the person marks ``danger = "destructive"`` runs only when
the call says ``destructive=true`` — the handler refuses it otherwise — and ``destructive_if`` makes
such a call need the person's explicit confirmation, like any destructive task.

Resources: ``shell.run`` claims none (a foreground command is bounded by its time limit);
``shell.start`` claims ``shell``, so at most one background command runs per home, and "stop the
command" is never ambiguous.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tether.tasks.spec import EVERYONE, Danger, Registry, TaskSpec
from tether.toolkits.shell import allowlist  # light; loaded with the registry, so fork servers preload it

H = "tether.toolkits.shell.handlers:"
A = allowlist.__name__ + ":"
MAX_ARGS = 32
MAX_VALUE_CHARS = 4096

CommandName = Annotated[
    str,
    Field(
        pattern=r"^[a-z][a-z0-9_-]{0,39}$",
        description="the name of an allow-listed command (shell.list shows them)",
        json_schema_extra={"labels": {"en": "command", "zh": "命令"}},
    ),
]
ArgName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,31}$")]
ArgValue = Annotated[str, Field(max_length=MAX_VALUE_CHARS)]


class RunParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: CommandName
    args: Annotated[
        dict[ArgName, ArgValue],
        Field(
            max_length=MAX_ARGS,
            description="a value for each {placeholder} of the command; each must match its pattern",
        ),
    ] = {}
    destructive: Annotated[
        bool,
        Field(description="true for a command the settings mark destructive; the person confirms the call"),
    ] = False


def add_tasks(registry: Registry) -> None:
    """Add the shell tasks to ``registry``."""
    for spec in _specs():
        registry.add(spec)


def _specs() -> list[TaskSpec]:
    return [
        TaskSpec(
            task_id="shell.list",
            handler=H + "list_commands",
            exposed_to=EVERYONE,
            resources=(),
            idempotent=True,
            available=A + "unavailable_any",
            description="List the allow-listed commands: their names, what each does, and the pattern each "
            "argument must match.",
            aliases=(
                "可用命令",
                "命令列表",
                "有哪些命令",
                "list commands",
                "which commands",
                "allowed commands",
            ),
        ),
        TaskSpec(
            task_id="shell.run",
            handler=H + "run",
            params=RunParams,
            exposed_to=EVERYONE,
            resources=(),
            danger=Danger.CAUTION,
            destructive_if=("destructive",),
            available=A + "unavailable",
            description="Run one allow-listed command with values for its placeholders (never a shell "
            "string) and wait for it; answers the exit code and the output (clipped).",
            aliases=("运行命令", "执行命令", "跑命令", "run the command", "execute the command", "run"),
        ),
        TaskSpec(
            task_id="shell.start",
            handler=H + "start",
            params=RunParams,
            exposed_to=EVERYONE,
            resources=("shell",),
            background=True,
            danger=Danger.CAUTION,
            destructive_if=("destructive",),
            available=A + "unavailable_background",
            description="Start a long allow-listed command in the background; its output lines stream as "
            "progress and it can be stopped. One background command at a time.",
            aliases=("后台运行", "后台执行命令", "启动命令", "start the command", "run in the background"),
        ),
    ]


registry = Registry(ref="tether.toolkits.shell.specs:registry")
add_tasks(registry)
