"""The handler of ``skills.read`` (runs inline: it only reads text)."""

from __future__ import annotations

from typing import Any

from tether.errors import TaskFailed
from tether.tasks.context import TaskContext
from tether.toolkits.skills.library import SkillLibrary


def read_skill(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params: Any = ctx.params
    library = SkillLibrary(ctx.home)
    try:
        text = library.read(params.name, params.resource)
    except KeyError as exc:
        raise TaskFailed(str(exc.args[0])) from exc
    skill = library.get(params.name)
    assert skill is not None
    what = params.resource or "instructions"
    return f"skill {skill.name}: {what} ({len(text)} characters)", {
        "name": skill.name,
        "description": skill.description,
        "text": text,
        "resources": list(skill.resources),
    }
