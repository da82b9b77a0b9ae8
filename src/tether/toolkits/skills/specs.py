"""The ``skills.read`` task: a skill's instructions, on demand (light: no heavy imports)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tether.tasks.spec import EVERYONE, Isolation, Registry, TaskSpec


class ReadSkillParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[
        str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$", description="the skill's name, as listed")
    ]
    resource: Annotated[
        str | None,
        Field(max_length=200, description="one of the skill's resource files; none for its instructions"),
    ] = None


def add_tasks(registry: Registry) -> None:
    registry.add(
        TaskSpec(
            task_id="skills.read",
            handler="tether.toolkits.skills.handlers:read_skill",
            params=ReadSkillParams,
            exposed_to=EVERYONE,
            resources=(),
            isolation=Isolation.INLINE,
            idempotent=True,
            description=(
                "Read a skill's instructions (listed by name in the system prompt) before following it."
            ),
            aliases=("读取技能", "技能", "read skill", "skill"),
        )
    )


registry = Registry(ref="tether.toolkits.skills.specs:registry")
add_tasks(registry)
