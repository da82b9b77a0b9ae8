"""The README's robot example as a second toolkit, so the offline planner is not tuned to one game."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tether import Catalog, InCatalog, Registry, TaskSpec
from tether.tasks.spec import Danger, Isolation

ROOMS = Catalog(
    "room",
    {
        "kitchen": ("厨房",),
        "garage": ("车库",),
        "living room": ("客厅", "lounge"),
        "bedroom": ("卧室",),
    },
)


class CleanParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    room: Annotated[str, InCatalog(catalog=ROOMS), Field(json_schema_extra={"labels": {"zh": "房间"}})]
    passes: Annotated[int, Field(ge=1, le=5)] = 1


H = "tests.support.registry:"
robot = Registry(ref="tests.support.robot:robot")
robot.add(
    TaskSpec(
        task_id="robot.clean",
        handler=H + "quick",
        params=CleanParams,
        description="Vacuum one room.",
        aliases=("打扫", "吸尘", "vacuum"),
        resources=("robot",),
        exposed_to={"agent", "cli"},
    )
)
robot.add(
    TaskSpec(
        task_id="robot.dock",
        handler=H + "quick",
        description="Send the robot back to its dock to charge.",
        aliases=("回去充电", "回充", "充电", "go charge", "dock", "go home"),
        resources=("robot",),
        exposed_to={"agent", "cli"},
    )
)
robot.add(
    TaskSpec(
        task_id="robot.status",
        handler=H + "quick",
        description="Battery, dock and cleaning state of the robot.",
        aliases=("状态", "机器人状态", "status", "robot status"),
        resources=(),
        isolation=Isolation.INLINE,
        exposed_to={"agent", "cli"},
    )
)
robot.add(
    TaskSpec(
        task_id="robot.reset_map",
        handler=H + "quick",
        description="Erase the robot's map of the home. Destructive.",
        aliases=("清空地图", "重置地图", "reset the map", "erase the map"),
        danger=Danger.DESTRUCTIVE,
        resources=("robot",),
        exposed_to={"agent", "cli"},
    )
)
