"""The demo registry: ``tether.toolkits.demo.registry:registry``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.tasks.catalog import InCatalog
from tether.tasks.spec import CLI, EVERYONE, Danger, Isolation, Registry, TaskSpec
from tether.toolkits.demo.catalog import CALYX_GOLD, INSTANCE_NAMES, INSTANCE_TYPES

CLI_ONLY = frozenset({CLI})
H = "tether.toolkits.demo.handlers:"

InstanceType = Annotated[
    str,
    InCatalog(catalog=INSTANCE_TYPES),
    Field(
        description="canonical instance type, e.g. 拟造花萼（金）",
        json_schema_extra={"labels": {"en": "instance type", "zh": "副本类型"}},
    ),
]
InstanceName = Annotated[
    str,
    InCatalog(catalog=INSTANCE_NAMES, depends_on="instance_type"),
    Field(
        description="canonical instance name within the type, e.g. 藏珍之蕾",
        json_schema_extra={"labels": {"en": "instance", "zh": "副本"}},
    ),
]


class FarmParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_type: InstanceType
    instance_name: InstanceName
    attempts: Annotated[
        int,
        Field(
            ge=1, le=99, description="how many runs, 1 to 99", json_schema_extra={"labels": {"zh": "次数"}}
        ),
    ] = 1


class LoopFarmParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_type: InstanceType = CALYX_GOLD
    instance_name: InstanceName = "藏珍之蕾"
    rounds: Annotated[
        int | None, Field(ge=1, le=100_000, description="stop after this many; none = until stopped")
    ] = None


class SalvageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rarity: Annotated[
        Literal[2, 3, 4],
        Field(
            description="relic rarity in stars; five-star relics are never salvaged",
            json_schema_extra={"labels": {"en": "rarity (stars)", "zh": "遗器星级"}},
        ),
    ]


ENV = ("TETHER_DEMO_STEP_S",)


def _lifecycle_specs() -> tuple[TaskSpec, ...]:
    """Starting and closing the game."""
    return (
        TaskSpec(
            task_id="demo.start_game",
            handler=H + "start_game",
            exposed_to=EVERYONE,
            idempotent=True,
            description="Start the game (does nothing if it is already running).",
            aliases=(
                "启动游戏",
                "打开游戏",
                "开游戏",
                "开始游戏",
                "进游戏",
                "start the game",
                "launch the game",
                "open the game",
            ),
        ),
        TaskSpec(
            task_id="demo.exit_game",
            handler=H + "exit_game",
            exposed_to=EVERYONE,
            idempotent=True,
            danger=Danger.CAUTION,
            description="Close the game. Only when the person asks for it.",
            aliases=(
                "退出游戏",
                "关闭游戏",
                "关游戏",
                "退出",
                "exit the game",
                "close the game",
                "quit the game",
                "exit",
            ),
        ),
    )


def _play_specs() -> tuple[TaskSpec, ...]:
    """What a player does in the running game; the last one destroys things."""
    return (
        TaskSpec(
            task_id="demo.daily_training",
            handler=H + "daily_training",
            exposed_to=EVERYONE,
            requires=("game_running",),
            description="Do the daily training: claim missions, train, collect the rewards.",
            aliases=("每日实训", "日常", "每日任务", "daily training", "dailies", "daily missions"),
        ),
        TaskSpec(
            task_id="demo.farm_instance",
            handler=H + "farm_instance",
            params=FarmParams,
            exposed_to=EVERYONE,
            requires=("game_running",),
            description="Farm one instance a number of times (about a second of work per attempt).",
            aliases=("刷副本", "刷", "打副本", "farm", "run the instance", "grind"),
        ),
        TaskSpec(
            task_id="demo.loop_farm",
            handler=H + "loop_farm",
            params=LoopFarmParams,
            exposed_to=EVERYONE,
            requires=("game_running",),
            background=True,
            description="Farm in the background until stopped (or for a number of rounds); reports progress.",
            aliases=("挂机", "循环刷", "一直刷", "后台刷", "keep farming", "farm in the background", "loop"),
        ),
        TaskSpec(
            task_id="demo.salvage_relics",
            handler=H + "salvage_relics",
            params=SalvageParams,
            exposed_to=EVERYONE,
            requires=("game_running",),
            danger=Danger.DESTRUCTIVE,
            description=(
                "Salvage (destroy) all relics of one rarity. Destructive: needs the person to confirm."
            ),
            aliases=("分解遗器", "遗器分解", "分解", "salvage relics", "salvage", "break down relics"),
        ),
    )


def _status_and_debug_specs() -> tuple[TaskSpec, ...]:
    """The game's state, and two tasks that misbehave on purpose (for the CLI only)."""
    return (
        TaskSpec(
            task_id="demo.status",
            handler=H + "status",
            exposed_to=EVERYONE,
            resources=(),
            isolation=Isolation.INLINE,
            idempotent=True,
            description="Whether the game runs, and its lifetime counters. Never waits for a lock.",
            aliases=("状态", "游戏状态", "status", "game status"),
        ),
        TaskSpec(
            task_id="demo.debug_crash",
            handler=H + "debug_crash",
            exposed_to=CLI_ONLY,
            resources=(),
            description="Debug: the worker dies without publishing a result.",
        ),
        TaskSpec(
            task_id="demo.debug_hang",
            handler=H + "debug_hang",
            exposed_to=CLI_ONLY,
            background=True,
            description=(
                "Debug: a background task (with a child process) that ignores stop requests and SIGINT."
            ),
        ),
    )


def add_tasks(registry: Registry) -> None:
    """The demo game's tasks and their precondition, added to ``registry`` in this order."""
    registry.precondition(
        "game_running", "tether.toolkits.demo.game:check_running", "the demo game is running"
    )
    for spec in (*_lifecycle_specs(), *_play_specs(), *_status_and_debug_specs()):
        registry.add(spec)


registry = Registry(ref="tether.toolkits.demo.registry:registry", env=ENV)
add_tasks(registry)
