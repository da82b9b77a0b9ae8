"""The public API, the error families, and the layer picture: pinned so that they cannot drift."""

from __future__ import annotations

import ast
import inspect
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import tether
from tether import errors

SRC = Path(__file__).resolve().parent.parent / "src" / "tether"

PUBLIC = [
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
    "Pruned",
    "Recovery",
    "Registry",
    "RegistryError",
    "PlanError",
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


def test_all_is_pinned_sorted_and_every_name_resolves() -> None:
    assert tether.__all__ == sorted(tether.__all__) == sorted(PUBLIC)
    for name in tether.__all__:
        assert getattr(tether, name) is not None


def _error_classes() -> list[type[errors.TetherError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.TetherError) and cls.__module__ == errors.__name__
    ]


def test_every_error_is_exported_and_has_its_own_code() -> None:
    classes = _error_classes()
    assert {cls.__name__ for cls in classes} <= set(tether.__all__)
    codes = [cls.code for cls in classes]
    assert len(codes) == len(set(codes))


def test_handler_signals_are_a_family_apart_from_failures() -> None:
    assert issubclass(errors.TaskFailed, errors.TaskSignal) and issubclass(
        errors.StopRequested, errors.TaskSignal
    )
    assert not issubclass(errors.TaskSignal, errors.ToolError | errors.ModelError | errors.JobError)


PICKLER = """
import pickle, sys
from tether import errors
for cls in [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.TetherError)]:
    error = cls(f"{cls.__name__} says hi", status=503, nested={"a": [1]})
    sys.stdout.buffer.write(pickle.dumps(error) + b"\\n--\\n")
"""


def test_errors_cross_a_process_boundary_intact() -> None:
    out = subprocess.run([sys.executable, "-c", PICKLER], capture_output=True, check=True).stdout
    received = [pickle.loads(chunk) for chunk in out.split(b"\n--\n") if chunk]
    assert {type(e) for e in received} == set(_error_classes())
    for error in received:
        assert error.message == f"{type(error).__name__} says hi"
        assert error.data == {"status": 503, "nested": {"a": [1]}}


def test_importing_tether_and_the_worker_stays_light() -> None:
    """The worker's start path must not pull in the CLI, the store, psutil or anything heavy."""
    code = (
        "import sys, tether.execution.worker\n"
        "heavy = [m for m in ('typer', 'rich', 'psutil', 'sqlite3', 'sqlalchemy', 'openai',"
        " 'tether.execution.executor', 'tether.store') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# -- the layer picture (docs/architecture.md): nothing imports upward ---------------------------------

ALLOWED: dict[str, set[str]] = {
    "tether.errors": set(),
    "tether.events": set(),
    "tether.resilience": {"tether.errors"},
    "tether.credentials": {"tether.errors"},
    "tether.config": {"tether.errors", "tether.resilience"},
    "tether.installation": {"tether.config", "tether.errors"},  # a home's identity, beside its settings
    "tether.telemetry": {"tether.config"},  # traces (tether[otel]): below everything that is traced
    "tether.tasks": {"tether.tasks", "tether.errors"},
    "tether.store": {"tether.store", "tether.tasks", "tether.errors", "tether.events"},
    "tether.runtime": {
        "tether.config",
        "tether.installation",
        "tether.errors",
        "tether.events",
        "tether.resilience",
        "tether.store",
        "tether.credentials",
    },
    # Toolkits: the handlers, at the bottom. They read their settings and keys, build documents with
    # tether.artifacts, and web.summarize_text asks the home's model as a library (a tool calling a model
    # is not a model calling tools; it runs in the worker, under the executor's checks like any handler).
    "tether.toolkits": {
        "tether.toolkits",
        "tether.tasks",
        "tether.errors",
        "tether.config",
        "tether.credentials",
        "tether.artifacts",
        "tether.models",
    },
    "tether.artifacts": {"tether.artifacts", "tether.errors"},
    "tether.execution": {
        "tether.execution",
        "tether.tasks",
        "tether.store",
        "tether.config",
        "tether.errors",
        "tether.runtime",
        "tether.events",
        "tether.telemetry",
        "tether.credentials",  # the trust boundary hands a worker the secrets its task names, no others
    },
    "tether.models": {
        "tether.models",
        "tether.errors",
        "tether.config",
        "tether.credentials",
        "tether.resilience",
    },
    "tether.testing": {"tether.models"},
    "tether.agent": {
        "tether.agent",
        "tether.models",
        "tether.execution",
        "tether.tasks",
        "tether.store",
        "tether.config",
        "tether.events",
        "tether.errors",
        "tether.runtime",
        "tether.resilience",
        "tether.toolkits.skills",  # the skills listed in the system prompt (the library, no handler)
        "tether.telemetry",
    },
}
# The supervisor stands on the agent: it may use everything the agent may, and the agent itself.
# The supervisor starts background executors, and hands them the keys it was given (credentials).
# Its executors are named after the home's identity (installation).
ALLOWED["tether.supervisor"] = {
    *ALLOWED["tether.agent"],
    "tether.supervisor",
    "tether.credentials",
    "tether.installation",
}
ANYTHING = ("tether.interfaces", "tether.__init__")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts if parts[-1] != "__init__" or len(parts) == 2 else parts[:-1])


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name == "tether" or name.startswith("tether.")}


def _layer(module: str, table: dict[str, set[str]] | tuple[str, ...]) -> str | None:
    candidates = [key for key in table if module == key or module.startswith(key + ".")]
    return max(candidates, key=len) if candidates else None


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_nothing_imports_upward(path: Path) -> None:
    module = _module_name(path)
    if _layer(module, ANYTHING):
        return
    layer = _layer(module, ALLOWED)
    assert layer is not None, f"{module} belongs to no layer of the picture: add it to ALLOWED and the docs"
    upward = sorted(
        name
        for name in _imports(path)
        if not any(name == ok or name.startswith(ok + ".") for ok in ALLOWED[layer])
    )
    assert upward == [], f"{module} ({layer}) imports {upward}"
