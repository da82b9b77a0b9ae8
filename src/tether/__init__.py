"""tether: a runtime for controlled-autonomy agents. The model chooses; the executor acts.

The public API is what ``__all__`` lists (a test pins it): every error tether raises and every type its
functions return. Names are imported lazily so that ``import tether`` (and so every worker process)
stays cheap; ``from tether import Executor`` works as usual.
"""

from __future__ import annotations

# Not ``from typing import TYPE_CHECKING``: importing typing costs the thin ``tether`` client ~10 ms.
TYPE_CHECKING = False

__version__ = "0.1.0"

_EXPORTS = {
    "AgentSettings": "tether.config",
    "BudgetReview": "tether.models.base",
    "BudgetReviewed": "tether.events",
    "Catalog": "tether.tasks.catalog",
    "CircuitOpen": "tether.errors",
    "ConfigError": "tether.errors",
    "Confirmation": "tether.tasks.confirm",
    "ConfirmationAnswered": "tether.events",
    "ConfirmationRequested": "tether.events",
    "ConversationSession": "tether.agent.session",
    "CredentialError": "tether.errors",
    "Danger": "tether.tasks.spec",
    "Event": "tether.events",
    "EventBus": "tether.events",
    "EventLog": "tether.store.events",
    "Executor": "tether.execution.executor",
    "InCatalog": "tether.tasks.catalog",
    "Isolation": "tether.tasks.spec",
    "JobError": "tether.errors",
    "JobManager": "tether.execution.jobs",
    "JobNotFound": "tether.errors",
    "JobRecord": "tether.store.jobs",
    "JobStateChanged": "tether.events",
    "LockBusy": "tether.errors",
    "Model": "tether.models.base",
    "ModelConnectionError": "tether.errors",
    "ModelDecided": "tether.events",
    "ModelThinking": "tether.events",
    "ModelError": "tether.errors",
    "ModelHTTPError": "tether.errors",
    "ModelOutputError": "tether.errors",
    "ModelRefused": "tether.errors",
    "ModelRequestsForbidden": "tether.errors",
    "ModelResponse": "tether.models.base",
    "ModelSettings": "tether.config",
    "OfflineModel": "tether.models.offline",
    "OpenAICompatModel": "tether.models.openai_compat",
    "OpenJob": "tether.models.base",
    "Pruned": "tether.execution.jobs",
    "Recovery": "tether.execution.jobs",
    "Registry": "tether.tasks.spec",
    "RegistryError": "tether.errors",
    "PlanError": "tether.errors",
    "RunEnded": "tether.errors",
    "Runtime": "tether.runtime",
    "Settings": "tether.config",
    "StepRecord": "tether.store.threads",
    "StopRequested": "tether.errors",
    "StoreError": "tether.errors",
    "StoreSettings": "tether.config",
    "TaskContext": "tether.tasks.context",
    "TaskFailed": "tether.errors",
    "TaskResult": "tether.tasks.result",
    "TaskSignal": "tether.errors",
    "TaskSpec": "tether.tasks.spec",
    "TaskStatus": "tether.tasks.result",
    "TetherError": "tether.errors",
    "ToolCall": "tether.models.base",
    "ToolDef": "tether.models.base",
    "ToolError": "tether.errors",
    "ToolFinished": "tether.events",
    "ToolNotFound": "tether.errors",
    "ToolOutcome": "tether.models.base",
    "ToolProgress": "tether.events",
    "ToolRejected": "tether.errors",
    "ToolStarted": "tether.events",
    "ToolSurface": "tether.agent.surface",
    "TurnContext": "tether.models.base",
    "TurnFinished": "tether.events",
    "TurnResult": "tether.agent.turn",
    "TurnStarted": "tether.events",
    "TurnStatus": "tether.agent.turn",
    "execution_id_for": "tether.execution.admission",
}

__all__ = [
    "AgentSettings",
    "BudgetReview",
    "BudgetReviewed",
    "Catalog",
    "CircuitOpen",
    "ConfigError",
    "Confirmation",
    "ConfirmationAnswered",
    "ConfirmationRequested",
    "ConversationSession",
    "CredentialError",
    "Danger",
    "Event",
    "EventBus",
    "EventLog",
    "Executor",
    "InCatalog",
    "Isolation",
    "JobError",
    "JobManager",
    "JobNotFound",
    "JobRecord",
    "JobStateChanged",
    "LockBusy",
    "Model",
    "ModelConnectionError",
    "ModelDecided",
    "ModelError",
    "ModelHTTPError",
    "ModelOutputError",
    "ModelRefused",
    "ModelRequestsForbidden",
    "ModelResponse",
    "ModelSettings",
    "ModelThinking",
    "OfflineModel",
    "OpenAICompatModel",
    "OpenJob",
    "PlanError",
    "Pruned",
    "Recovery",
    "Registry",
    "RegistryError",
    "RunEnded",
    "Runtime",
    "Settings",
    "StepRecord",
    "StopRequested",
    "StoreError",
    "StoreSettings",
    "TaskContext",
    "TaskFailed",
    "TaskResult",
    "TaskSignal",
    "TaskSpec",
    "TaskStatus",
    "TetherError",
    "ToolCall",
    "ToolDef",
    "ToolError",
    "ToolFinished",
    "ToolNotFound",
    "ToolOutcome",
    "ToolProgress",
    "ToolRejected",
    "ToolStarted",
    "ToolSurface",
    "TurnContext",
    "TurnFinished",
    "TurnResult",
    "TurnStarted",
    "TurnStatus",
    "__version__",
    "execution_id_for",
]

if TYPE_CHECKING:
    from typing import Any

    from tether.agent.session import ConversationSession
    from tether.agent.surface import ToolSurface
    from tether.agent.turn import TurnResult, TurnStatus
    from tether.config import AgentSettings, ModelSettings, Settings, StoreSettings
    from tether.errors import (
        CircuitOpen,
        ConfigError,
        CredentialError,
        JobError,
        JobNotFound,
        LockBusy,
        ModelConnectionError,
        ModelError,
        ModelHTTPError,
        ModelOutputError,
        ModelRefused,
        ModelRequestsForbidden,
        PlanError,
        RegistryError,
        RunEnded,
        StopRequested,
        StoreError,
        TaskFailed,
        TaskSignal,
        TetherError,
        ToolError,
        ToolNotFound,
        ToolRejected,
    )
    from tether.events import (
        BudgetReviewed,
        ConfirmationAnswered,
        ConfirmationRequested,
        Event,
        EventBus,
        JobStateChanged,
        ModelDecided,
        ModelThinking,
        ToolFinished,
        ToolProgress,
        ToolStarted,
        TurnFinished,
        TurnStarted,
    )
    from tether.execution.admission import execution_id_for
    from tether.execution.executor import Executor
    from tether.execution.jobs import JobManager, Pruned, Recovery
    from tether.models.base import (
        BudgetReview,
        Model,
        ModelResponse,
        OpenJob,
        ToolCall,
        ToolDef,
        ToolOutcome,
        TurnContext,
    )
    from tether.models.offline import OfflineModel
    from tether.models.openai_compat import OpenAICompatModel
    from tether.runtime import Runtime
    from tether.store.events import EventLog
    from tether.store.jobs import JobRecord
    from tether.store.threads import StepRecord
    from tether.tasks.catalog import Catalog, InCatalog
    from tether.tasks.confirm import Confirmation
    from tether.tasks.context import TaskContext
    from tether.tasks.result import TaskResult, TaskStatus
    from tether.tasks.spec import Danger, Isolation, Registry, TaskSpec


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    import importlib  # here, not at the top: the thin ``tether`` client imports this package

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
