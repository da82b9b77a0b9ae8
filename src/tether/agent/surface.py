"""The tool surface one caller sees, generated from the registry (contract 1).

Business tools come from the specs exposed to the caller: the JSON schema of the params model, catalog
values as enums, the words people use for them, and danger and background stated in the description.
Two control tools, ``get_task_status`` and ``stop_task``, go to the job manager and never take a
resource lock; they are there for every caller, and for an agent only when its grants include
``jobs.status`` / ``jobs.stop`` (the ids they are granted under). An agent's grants narrow the business
tools the same way: a task they do not cover is not on its surface. A tool name is the task id with
``.`` spelled ``__`` (providers allow only ``[A-Za-z0-9_-]`` in function names).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tether.errors import ConfigError
from tether.models.base import ToolDef
from tether.tasks.catalog import Catalog, InCatalog
from tether.tasks.grants import JOBS_STATUS, JOBS_STOP, Grants
from tether.tasks.spec import CONTROL, Danger, Registry, TaskSpec

GET_STATUS = "get_task_status"
STOP_TASK = "stop_task"

_EXECUTION_ID = {
    "type": "object",
    "properties": {
        "execution_id": {"type": "string", "description": "the execution_id a tool call returned"}
    },
    "required": ["execution_id"],
    "additionalProperties": False,
}

CONTROL_TOOLS = (
    ToolDef(
        name=GET_STATUS,
        description="Current status, progress and result of a job by execution_id. Never waits for a lock.",
        parameters=_EXECUTION_ID,
        aliases=(
            "进度",
            "任务状态",
            "查询任务",
            "怎么样了",
            "progress",
            "job status",
            "how is it going",
            "how it's going",
            "how's it going",
            "how it is going",
            "how far",
            "check on",
            "进展",
            "汇报",
        ),
        kind="control",
    ),
    ToolDef(
        name=STOP_TASK,
        description="Stop a running job by execution_id: cooperatively, then by force. Takes no lock.",
        parameters=_EXECUTION_ID,
        aliases=(
            "停止",
            "停下",
            "停掉",
            "别刷了",
            "不要刷了",
            "结束任务",
            "stop",
            "halt",
            "cancel",
            "quit farming",
            "stop the job",
            "cancel the job",
            "kill the job",
            "停止任务",
            "取消任务",
        ),
        kind="control",
    ),
)


CONTROL_IDS = {GET_STATUS: JOBS_STATUS, STOP_TASK: JOBS_STOP}


def tool_name(task_id: str) -> str:
    return task_id.replace(".", "__")


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _words(catalog: Catalog) -> dict[str, tuple[str, ...]]:
    return {value: catalog.aliases_of(value) for value in catalog.values}


def _listing(words: dict[str, tuple[str, ...]]) -> str:
    return "; ".join(
        f"{value} ({', '.join(aliases)})" if aliases else value for value, aliases in words.items()
    )


def tool_for(spec: TaskSpec) -> ToolDef:
    schema: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    value_words: dict[str, dict[str, tuple[str, ...]]] = {}
    scoped_words: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {}
    depends_on: dict[str, str] = {}
    labels: dict[str, dict[str, str]] = {}
    if spec.params is not None:
        schema = _strip_titles(copy.deepcopy(spec.params.model_json_schema()))
        schema["additionalProperties"] = False
        for name, prop in schema.get("properties", {}).items():
            # Field(json_schema_extra={"labels": {"zh": "副本类型"}}): what people call the parameter.
            given = prop.pop("labels", None)
            if isinstance(given, dict):
                labels[name] = {str(k): str(v) for k, v in given.items()}
        for name, info in spec.params.model_fields.items():
            marker = next((m for m in info.metadata if isinstance(m, InCatalog)), None)
            if marker is None:
                continue
            prop = schema["properties"][name]
            note = prop.get("description", "")
            if marker.depends_on is None:
                catalog = marker.catalog_for(None)
                assert catalog is not None
                prop["enum"] = list(catalog.values)
                value_words[name] = _words(catalog)
                prop["description"] = (
                    f"{note}. Canonical values only; people may say: {_listing(value_words[name])}"
                )
            else:
                assert not isinstance(marker.catalog, Catalog)
                scoped = {parent: _words(cat) for parent, cat in marker.catalog.items()}
                scoped_words[name] = scoped
                depends_on[name] = marker.depends_on
                per = " | ".join(f"{parent}: {_listing(words)}" for parent, words in scoped.items())
                prop["description"] = f"{note}. Canonical value for the chosen {marker.depends_on}: {per}"
    description = spec.description
    if spec.aliases:
        description += f" Also called: {', '.join(spec.aliases)}."
    if spec.danger is Danger.DESTRUCTIVE:
        description += " DESTRUCTIVE: runs only after the person confirms it."
    elif spec.destructive_if:
        flags = " or ".join(f"{name}=true" for name in spec.destructive_if)
        description += f" With {flags} it is DESTRUCTIVE: that call runs only after the person confirms it."
    elif spec.danger is Danger.CAUTION:
        description += " Use with care: only when the person asks for it."
    if spec.background:
        description += (
            " Runs in the background: returns status running and an execution_id; check it with "
            f"{GET_STATUS} and end it with {STOP_TASK}."
        )
    return ToolDef(
        name=tool_name(spec.task_id),
        description=description,
        parameters=schema,
        aliases=spec.aliases,
        danger=spec.danger.value,
        background=spec.background,
        value_words=value_words,
        scoped_words=scoped_words,
        depends_on=depends_on,
        labels=labels,
    )


class ToolSurface:
    """The tools of ``registry`` that ``caller`` may use, plus the control tools."""

    def __init__(
        self,
        registry: Registry,
        caller: str,
        home: Path | None = None,
        grants: Grants | None = None,
        extra: tuple[ToolDef, ...] = (),
    ) -> None:
        """With ``home``, tasks that are not set up there (``TaskSpec.available``) are left off the
        surface; ``unavailable`` maps their tool names to the reason, so the agent can say why.
        ``grants`` narrow it to an agent's; ``extra`` are tools the session answers itself
        (``agents.delegate``), already checked against the grants."""
        self.caller = caller
        self.grants = grants
        self._specs: dict[str, TaskSpec] = {}
        self.unavailable: dict[str, str] = {}
        business: list[ToolDef] = []
        for spec in sorted(registry.for_caller(caller, grants), key=lambda s: s.task_id):
            if spec.task_id in CONTROL:
                continue  # offered as the two control tools below, under their own names
            name = tool_name(spec.task_id)
            if name in self._specs or name in (GET_STATUS, STOP_TASK):
                raise ConfigError(f"task {spec.task_id!r} maps to the tool name {name!r}, which is taken")
            reason = spec.unavailable(home) if home is not None else None
            if reason:
                self.unavailable[name] = reason
                continue
            self._specs[name] = spec
            business.append(tool_for(spec))
        self.business = tuple(business)
        self.control_tools = tuple(
            t for t in CONTROL_TOOLS if registry.get(CONTROL_IDS[t.name], caller, grants) is not None
        )
        self.extra = extra
        self.tools = (*self.business, *extra, *self.control_tools)

    def spec(self, name: str) -> TaskSpec | None:
        return self._specs.get(name)

    @staticmethod
    def tool_name(task_id: str) -> str:
        return task_id if task_id in (GET_STATUS, STOP_TASK) else tool_name(task_id)

    def task_id(self, name: str) -> str:
        """The task id a tool name stands for (an unknown name maps back the same way)."""
        spec = self._specs.get(name)
        return spec.task_id if spec is not None else name.replace("__", ".")

    @staticmethod
    def is_control(name: str) -> bool:
        return name in (GET_STATUS, STOP_TASK)

    def granted_control(self, name: str) -> bool:
        """Whether this surface's grants include the control tool ``name``."""
        return any(tool.name == name for tool in self.control_tools)
