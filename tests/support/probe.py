"""One task that says which ``opentelemetry`` modules its worker has imported (``tests/test_telemetry.py``:
with telemetry off, none). Workers import this module by ref."""

from __future__ import annotations

import sys
from typing import Any

from tether.tasks.context import TaskContext
from tether.tasks.spec import AGENT, CLI, Registry, TaskSpec

REF = "tests.support.probe:registry"


def modules(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    found = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
    return "reported", {"opentelemetry": found}


registry = Registry(ref=REF)
registry.add(
    TaskSpec(
        task_id="probe.modules",
        handler="tests.support.probe:modules",
        exposed_to=frozenset({AGENT, CLI}),
        resources=(),
        description="Report the modules this worker has imported.",
        aliases=("report the modules",),
    )
)
