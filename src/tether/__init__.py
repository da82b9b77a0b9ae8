"""tether: a runtime for controlled-autonomy agents. The model chooses; the executor acts.

The public API is what ``__all__`` lists. Names are imported lazily so that ``import tether`` (and so
every worker process) stays cheap; ``from tether import Executor`` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "AgentSettings": "tether.config",
    "Catalog": "tether.tasks.catalog",
    "CircuitOpen": "tether.errors",
    "ConfigError": "tether.errors",
    "Confirmation": "tether.tasks.confirm",
    "ConversationSession": "tether.agent.session",
    "Danger": "tether.tasks.spec",
    "Executor": "tether.execution.executor",
    "InCatalog": "tether.tasks.catalog",
    "Isolation": "tether.tasks.spec",
    "JobError": "tether.errors",
    "JobManager": "tether.execution.jobs",
    "JobNotFound": "tether.errors",
    "LockBusy": "tether.errors",
    "Model": "tether.models.base",
    "ModelError": "tether.errors",
    "ModelHTTPError": "tether.errors",
    "ModelRefused": "tether.errors",
    "ModelResponse": "tether.models.base",
    "ModelSettings": "tether.config",
    "OfflineModel": "tether.models.offline",
    "OpenAICompatModel": "tether.models.openai_compat",
    "Registry": "tether.tasks.spec",
    "RegistryError": "tether.errors",
    "Settings": "tether.config",
    "StopRequested": "tether.errors",
    "StoreError": "tether.errors",
    "StoreSettings": "tether.config",
    "TaskContext": "tether.tasks.context",
    "TaskFailed": "tether.errors",
    "TaskResult": "tether.tasks.result",
    "TaskSpec": "tether.tasks.spec",
    "TaskStatus": "tether.tasks.result",
    "TetherError": "tether.errors",
    "ToolCall": "tether.models.base",
    "ToolDef": "tether.models.base",
    "ToolError": "tether.errors",
    "ToolNotFound": "tether.errors",
    "ToolRejected": "tether.errors",
    "ToolSurface": "tether.agent.surface",
}

__all__ = [
    "AgentSettings",
    "Catalog",
    "CircuitOpen",
    "ConfigError",
    "Confirmation",
    "ConversationSession",
    "Danger",
    "Executor",
    "InCatalog",
    "Isolation",
    "JobError",
    "JobManager",
    "JobNotFound",
    "LockBusy",
    "Model",
    "ModelError",
    "ModelHTTPError",
    "ModelRefused",
    "ModelResponse",
    "ModelSettings",
    "OfflineModel",
    "OpenAICompatModel",
    "Registry",
    "RegistryError",
    "Settings",
    "StopRequested",
    "StoreError",
    "StoreSettings",
    "TaskContext",
    "TaskFailed",
    "TaskResult",
    "TaskSpec",
    "TaskStatus",
    "TetherError",
    "ToolCall",
    "ToolDef",
    "ToolError",
    "ToolNotFound",
    "ToolRejected",
    "ToolSurface",
    "__version__",
]

if TYPE_CHECKING:
    from tether.agent.session import ConversationSession
    from tether.agent.surface import ToolSurface
    from tether.config import AgentSettings, ModelSettings, Settings, StoreSettings
    from tether.errors import (
        CircuitOpen,
        ConfigError,
        JobError,
        JobNotFound,
        LockBusy,
        ModelError,
        ModelHTTPError,
        ModelRefused,
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
    from tether.models.base import Model, ModelResponse, ToolCall, ToolDef
    from tether.models.offline import OfflineModel
    from tether.models.openai_compat import OpenAICompatModel
    from tether.tasks.catalog import Catalog, InCatalog
    from tether.tasks.confirm import Confirmation
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
