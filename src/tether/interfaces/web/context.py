"""What every part of the web app shares: the context it serves from (one home's runtime, registry and
executor), the caller it acts as, and the path parameters it accepts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Path as PathParam

from tether.agent.session import THREAD_ID_RE
from tether.execution.admission import EXECUTION_ID_RE
from tether.interfaces.web import security
from tether.runtime import Runtime
from tether.supervisor import conversations
from tether.tasks.spec import Registry

CALLER = "web"
SOURCE = "person:web"
RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
TASK_ID = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
PENDING_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"
MAX_INT = 2**62
AGENT_THREAD = conversations.AGENT_THREAD  # an agent task's thread in a goal run: the run's questions

ThreadId = Annotated[str, PathParam(pattern=THREAD_ID_RE.pattern, description="a thread id")]
ExecutionId = Annotated[str, PathParam(pattern=EXECUTION_ID_RE.pattern, description="an execution id")]
RunId = Annotated[str, PathParam(pattern=RUN_ID, description="a run id")]
TaskId = Annotated[str, PathParam(pattern=TASK_ID, description="a task of the run's plan")]
PendingId = Annotated[str, PathParam(pattern=PENDING_ID, description="the id of the question asked")]


@dataclass
class WebContext:
    """What the app serves from: one home's runtime, its registry and its executor."""

    runtime: Runtime
    registry: Registry
    executor: Any
    client: Any  # a DBOS client of the home
    policy: security.Policy
    model_label: str = "offline"
    executor_id: str = ""
    max_subscribers: int = 64
    offline: bool = True
    background: list[Any] = field(default_factory=list)  # coroutines run for the app's lifetime
