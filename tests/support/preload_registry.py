"""A registry that asks the fork server to preload a module (and one that cannot be imported)."""

from __future__ import annotations

import os
import sys
from typing import Any

from tether.tasks.context import TaskContext
from tether.tasks.spec import CLI, Registry, TaskSpec


def where(ctx: TaskContext) -> dict[str, Any]:
    module = sys.modules.get("tests.support.preloaded")
    return {"worker": os.getpid(), "preloaded_in": getattr(module, "LOADED_IN", None)}


registry = Registry(
    ref="tests.support.preload_registry:registry",
    preload=("tests.support.no_such_module", "tests.support.preloaded"),
)
registry.add(
    TaskSpec(
        task_id="p.where", handler="tests.support.preload_registry:where", exposed_to={CLI}, resources=()
    )
)


threaded = Registry(
    ref="tests.support.preload_registry:threaded",
    preload=("tests.support.threaded", "tests.support.preloaded"),
)
threaded.add(
    TaskSpec(
        task_id="p.where", handler="tests.support.preload_registry:where", exposed_to={CLI}, resources=()
    )
)
