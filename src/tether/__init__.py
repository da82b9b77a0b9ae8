"""tether: a runtime for controlled-autonomy agents. The model chooses; the executor acts.

The public API is what ``__all__`` lists. Names are imported lazily so that ``import tether`` (and so
every worker process) stays cheap; ``from tether import Executor`` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Catalog": "tether.tasks.catalog",
    "ConfigError": "tether.errors",
    "Danger": "tether.tasks.spec",
    "Executor": "tether.execution.executor",
    "InCatalog": "tether.tasks.catalog",
    "Isolation": "tether.tasks.spec",
    "JobError": "tether.errors",
    "JobManager": "tether.execution.jobs",
    "JobNotFound": "tether.errors",
    "LockBusy": "tether.errors",
    "Registry": "tether.tasks.spec",
    "RegistryError": "tether.errors",
    "Settings": "tether.config",
    "StopRequested": "tether.errors",
    "StoreError": "tether.errors",
    "TaskContext": "tether.tasks.context",
    "TaskFailed": "tether.errors",
    "TaskResult": "tether.tasks.result",
    "TaskSpec": "tether.tasks.spec",
    "TaskStatus": "tether.tasks.result",
    "TetherError": "tether.errors",
    "ToolError": "tether.errors",
    "ToolNotFound": "tether.errors",
    "ToolRejected": "tether.errors",
}

__all__ = [
    "Catalog",
    "ConfigError",
    "Danger",
    "Executor",
    "InCatalog",
    "Isolation",
    "JobError",
    "JobManager",
    "JobNotFound",
    "LockBusy",
    "Registry",
    "RegistryError",
    "Settings",
    "StopRequested",
    "StoreError",
    "TaskContext",
    "TaskFailed",
    "TaskResult",
    "TaskSpec",
    "TaskStatus",
    "TetherError",
    "ToolError",
    "ToolNotFound",
    "ToolRejected",
    "__version__",
]

if TYPE_CHECKING:
    from tether.config import Settings
    from tether.errors import (
        ConfigError,
        JobError,
        JobNotFound,
        LockBusy,
        RegistryError,
        StopRequested,
        StoreError,
        TaskFailed,
        TetherError,
        ToolError,
        ToolNotFound,
        ToolRejected,
    )
    from tether.execution.executor import Executor
    from tether.execution.jobs import JobManager
    from tether.tasks.catalog import Catalog, InCatalog
    from tether.tasks.context import TaskContext
    from tether.tasks.result import TaskResult, TaskStatus
    from tether.tasks.spec import Danger, Isolation, Registry, TaskSpec


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
