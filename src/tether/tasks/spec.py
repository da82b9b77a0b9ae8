"""Task specifications and the registry that holds them (contract 1).

A ``TaskSpec`` is the policy of one atomic task: where its handler lives (imported only inside the
worker), which parameters it takes, who may call it, what it locks, how dangerous it is. The registry is
the whitelist: a task not exposed to a caller does not exist for that caller.
"""

from __future__ import annotations

import enum
import importlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tether.errors import ConfigError, RegistryError, ToolNotFound
from tether.tasks.callers import AGENT as AGENT  # re-exported: tasks meet their callers here
from tether.tasks.callers import CLI as CLI
from tether.tasks.callers import EVERYONE as EVERYONE
from tether.tasks.callers import MCP as MCP
from tether.tasks.callers import NAME_RE
from tether.tasks.grants import JOBS_STATUS, JOBS_STOP, REMEMBER, Grants, allowed

TASK_ID_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# A secret's credential entry, always in a namespace (a model provider's key is one bare word: never
# handed), or a whole namespace.
SECRET_ENTRY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}\.(?:[a-z0-9_.-]{1,96}|\*)$")
MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
OBJECT_PATH_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

DEFAULT_RESOURCES = ("automation",)


class Danger(enum.StrEnum):
    SAFE = "safe"
    CAUTION = "caution"
    DESTRUCTIVE = "destructive"


class Isolation(enum.StrEnum):
    PROCESS = "process"
    INLINE = "inline"


def load_object(path: str) -> Any:
    """Import ``"package.module:attribute"``; errors name the path and what went wrong."""
    if not OBJECT_PATH_RE.match(path):
        raise RegistryError(f"{path!r} is not of the form 'package.module:attribute'")
    module_name, _, attribute = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryError(f"cannot import {module_name!r} for {path!r}: {exc}") from exc
    except Exception as exc:  # the module itself is broken: say so, with its own error
        raise RegistryError(
            f"importing {module_name!r} for {path!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise RegistryError(f"{module_name!r} has no attribute {attribute!r}") from exc
    return target


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSpec:
    task_id: str
    handler: str
    params: type[BaseModel] | None = None
    description: str = ""
    aliases: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    resources: tuple[str, ...] = DEFAULT_RESOURCES
    background: bool = False
    danger: Danger = Danger.SAFE
    idempotent: bool = False
    exposed_to: AbstractSet[str] = frozenset()  # stored as a frozenset
    timeout_s: float | None = None
    isolation: Isolation = Isolation.PROCESS
    # Boolean parameters that make one call destructive when true (``overwrite``): the call then needs
    # the person's confirmation like a destructive task, whatever ``danger`` says for the plain call.
    destructive_if: tuple[str, ...] = ()
    # Parameters holding the path of a file the task reads, and of one it changes (writes, moves,
    # deletes): a conversation then knows that a read made before a change of the same file is stale.
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    # ``"package.module:function"``: ``function(home) -> str | None`` says why the task cannot be used
    # in this home (no search provider configured, no command allow-listed); None when it can. An
    # unavailable task is left off the model's tool surface and refused by the executor with that reason.
    available: str | None = None
    # ``"package.module:function"``: ``function(home, params, language) -> str`` says, in the person's
    # language ("zh" or "en"), what one call would touch (how many files and bytes a delete removes). The
    # confirmation question is built with it when it is asked; it must only look, never change anything.
    impact: str | None = None
    # Environment variables this task's worker needs beyond its registry's ``env`` (names, never values:
    # a request file records the worker's environment). ``mcp.refresh``, and an imported MCP tool whose
    # server has secrets, name what reaches the OS keyring, which other workers never get.
    env: tuple[str, ...] = ()
    # Secrets its worker is handed by whoever starts it, from that process's own variables (a machine
    # with no OS keyring keeps an MCP server's secret in ``TETHER_API_KEY_MCP_…``): credential entries
    # (``mcp.vault.token``), or a namespace (``mcp.*``). Never the model's key; other workers get none.
    secrets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Accept lists and sets from callers, store immutable, ordered values.
        object.__setattr__(self, "aliases", tuple(self.aliases))
        object.__setattr__(self, "requires", tuple(self.requires))
        object.__setattr__(self, "resources", tuple(sorted(set(self.resources))))
        object.__setattr__(self, "exposed_to", frozenset(self.exposed_to))
        object.__setattr__(self, "danger", Danger(self.danger))
        object.__setattr__(self, "isolation", Isolation(self.isolation))
        object.__setattr__(self, "destructive_if", tuple(self.destructive_if))
        object.__setattr__(self, "reads", tuple(self.reads))
        object.__setattr__(self, "writes", tuple(self.writes))
        object.__setattr__(self, "env", tuple(self.env))
        object.__setattr__(self, "secrets", tuple(self.secrets))
        where = f"task {self.task_id!r}"
        if not TASK_ID_RE.match(self.task_id):
            raise RegistryError(f"{where}: ids are dotted lowercase names like 'demo.farm_instance'")
        if not OBJECT_PATH_RE.match(self.handler):
            raise RegistryError(f"{where}: handler must be 'package.module:function', got {self.handler!r}")
        if self.params is not None and not (
            isinstance(self.params, type) and issubclass(self.params, BaseModel)
        ):
            raise RegistryError(f"{where}: params must be a pydantic BaseModel subclass")
        for name in (*self.resources, *self.requires, *self.exposed_to):
            if not NAME_RE.match(name):
                raise RegistryError(f"{where}: {name!r} is not a valid resource, precondition or caller name")
        fields = self.params.model_fields if self.params is not None else {}
        named = {"destructive_if": self.destructive_if, "reads": self.reads, "writes": self.writes}
        for kind, names in named.items():
            for name in names:
                if name not in fields:
                    raise RegistryError(f"{where}: {kind} names {name!r}, which is not a parameter")
        if self.available is not None and not OBJECT_PATH_RE.match(self.available):
            raise RegistryError(
                f"{where}: available must be 'package.module:function', got {self.available!r}"
            )
        if self.impact is not None and not OBJECT_PATH_RE.match(self.impact):
            raise RegistryError(f"{where}: impact must be 'package.module:function', got {self.impact!r}")
        for name in self.env:
            if not ENV_NAME_RE.match(name):
                raise RegistryError(f"{where}: env: {name!r} is not an environment variable name")
        for entry in self.secrets:
            if not SECRET_ENTRY_RE.match(entry):
                raise RegistryError(
                    f"{where}: secrets: {entry!r} is not a credential entry ('mcp.vault.token') "
                    "or a namespace ('mcp.*')"
                )
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise RegistryError(f"{where}: timeout_s must be positive")
        if self.isolation is Isolation.INLINE and (
            self.danger is not Danger.SAFE or self.resources or self.background
        ):
            raise RegistryError(
                f"{where}: isolation='inline' is only for safe, foreground tasks that claim no resource"
            )

    def exposed(self, caller: str) -> bool:
        # Every caller may ask about and stop the jobs it may see (contract 9): which jobs those are is
        # the executor's check (``Executor.control``), not the control task's exposure.
        return caller in self.exposed_to or self.task_id in CONTROL

    def danger_for(self, params: Any) -> Danger:
        """The danger of one call with these (validated, JSON) arguments: ``destructive_if`` parameters
        that are true raise it to destructive."""
        if self.destructive_if and isinstance(params, dict):
            if any(params.get(name) is True for name in self.destructive_if):
                return Danger.DESTRUCTIVE
        return self.danger

    def impact_of(self, home: Path, params: Mapping[str, Any], language: str) -> str | None:
        """What this call would touch, for the person's confirmation question (its ``impact``), or
        None without one. A broken check says so instead of hiding the question."""
        if self.impact is None:
            return None
        try:
            describe: Callable[[Path, Mapping[str, Any], str], str | None] = load_object(self.impact)
            return describe(home, params, language)
        except Exception as exc:
            if language == "zh":
                return f"无法得知它会影响什么（{type(exc).__name__}: {exc}）"
            return f"what it would touch cannot be told ({type(exc).__name__}: {exc})"

    def unavailable(self, home: Path) -> str | None:
        """Why this task cannot be used in ``home`` (its ``available`` check), else None."""
        if self.available is None:
            return None
        check: Callable[[Path], str | None] = load_object(self.available)
        try:
            return check(home)
        except Exception as exc:  # a broken check must not hide as "available"
            return f"{self.task_id} cannot tell whether it is set up: {type(exc).__name__}: {exc}"


PreconditionCheck = Callable[[Path], "str | None"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Precondition:
    """A named environment check. ``check(home)`` returns None when satisfied, else why not."""

    name: str
    check: str
    description: str = ""


@dataclass(slots=True)
class Registry:
    """The task whitelist. ``ref`` is where a worker process re-imports this registry from.

    ``env`` names the environment variables its handlers need; workers get only those beyond a small
    allowlist (never the starter's keys and tokens). ``preload`` names modules the fork server imports
    while it is idle, after it is ready (heavy libraries a handler needs: a worker forked later starts
    with them loaded; the first task never waits for them).

    ``homes`` names functions ``function(home) -> Iterable[TaskSpec]`` (``"package.module:function"``)
    that add the tasks one home's settings define (tools imported from the MCP servers it configures):
    ``for_home`` is the registry as that home sees it, which the executor and the worker both use. It
    makes them again when a file or folder ``home_files`` names (relative to the home) has changed, so
    a long-running server sees a refreshed tool list or edited settings without a restart.
    """

    ref: str | None = None
    env: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()
    homes: tuple[str, ...] = ()
    home_files: tuple[str, ...] = ("settings.toml",)
    _specs: dict[str, TaskSpec] = field(default_factory=dict)
    _preconditions: dict[str, Precondition] = field(default_factory=dict)
    # On the registry ``for_home`` made: its home, the tasks of its own (without the home's), and the
    # state of ``home_files`` when the home's tasks were last made.
    _home: Path | None = None
    _own: dict[str, TaskSpec] = field(default_factory=dict)
    _stamp: tuple[object, ...] = ()

    def __post_init__(self) -> None:
        self.env = tuple(self.env)
        self.preload = tuple(self.preload)
        self.homes = tuple(self.homes)
        self.home_files = tuple(self.home_files)
        for path in self.homes:
            if not OBJECT_PATH_RE.match(path):
                raise RegistryError(f"registry homes: {path!r} is not 'package.module:function'")
        for name in self.preload:
            if not MODULE_RE.match(name):
                raise RegistryError(f"registry preload: {name!r} is not a module name")
        for name in self.env:
            if not ENV_NAME_RE.match(name):
                raise RegistryError(f"registry env: {name!r} is not an environment variable name")

    def for_home(self, home: Path) -> Registry:
        """This registry with the tasks ``home``'s settings add (its ``homes`` functions); itself when
        it has none or was made for ``home`` already. ``ConfigError`` when the settings are invalid."""
        if not self.homes or self._home == home:
            return self
        made = Registry(
            ref=self.ref, env=self.env, preload=self.preload, homes=self.homes, home_files=self.home_files
        )
        made._own = dict(self._specs if self._home is None else self._own)
        made._preconditions = dict(self._preconditions)
        made._home = home
        made._stamp = made._home_stamp()
        made._specs = made._with_home_tasks()
        return made

    def _home_stamp(self) -> tuple[object, ...]:
        assert self._home is not None
        stamp: list[object] = []
        for name in self.home_files:
            try:
                found = (self._home / name).stat()
            except OSError:
                stamp.append(None)
            else:
                stamp.append((found.st_mtime_ns, found.st_size, found.st_ino))
        return tuple(stamp)

    def _with_home_tasks(self) -> dict[str, TaskSpec]:
        assert self._home is not None
        specs = dict(self._own)
        for path in self.homes:
            tasks: Callable[[Path], Iterable[TaskSpec]] = load_object(path)
            for spec in tasks(self._home):
                if spec.task_id in specs or spec.task_id in OWN:
                    raise RegistryError(f"task {spec.task_id!r} of this home's settings is registered twice")
                specs[spec.task_id] = spec
        return specs

    def _current(self) -> dict[str, TaskSpec]:
        """The tasks, the home's made again first if its files changed since (a registry made by
        ``for_home``). Settings that became invalid meanwhile keep the tasks made before, logged."""
        if self._home is None:
            return self._specs
        stamp = self._home_stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._specs = self._with_home_tasks()
            except ConfigError as exc:
                logging.getLogger("tether.registry").warning(
                    "this home's tasks were kept as they were: %s", exc
                )
        return self._specs

    def add(self, spec: TaskSpec) -> TaskSpec:
        if spec.task_id in OWN:
            raise RegistryError(f"task {spec.task_id!r} is tether's own: every registry has it")
        if spec.task_id in self._specs:
            raise RegistryError(f"task {spec.task_id!r} is registered twice")
        missing = [name for name in spec.requires if name not in self._preconditions]
        if missing:
            raise RegistryError(f"task {spec.task_id!r} requires unknown preconditions {missing}")
        self._specs[spec.task_id] = spec
        if self._home is not None:
            self._own[spec.task_id] = spec  # kept when the home's tasks are made again
        return spec

    def task(
        self,
        task_id: str | None = None,
        *,
        description: str | None = None,
        catalogs: Mapping[str, Any] | None = None,
        labels: Mapping[str, Mapping[str, str]] | None = None,
        exposed_to: AbstractSet[str] = frozenset({AGENT, CLI}),
        **policy: Any,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """``@registry.task(...)``: the decorated function becomes a task (``tasks/function.py``); its
        signature is the parameter model, its docstring the description. ``policy`` takes the other
        ``TaskSpec`` fields (``danger``, ``resources``, ``aliases``, ``background``, …); it is exposed
        to the agent and the CLI unless ``exposed_to`` says otherwise. Returns the function unchanged."""
        from tether.tasks.function import task_spec_kwargs

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            own = task_spec_kwargs(
                function, task_id=task_id, description=description, catalogs=catalogs or {},
                labels=labels or {},
            )  # fmt: skip
            try:
                spec = TaskSpec(**own, exposed_to=exposed_to, **policy)
            except TypeError as exc:  # a misspelt policy field
                known = ", ".join(f for f in TaskSpec.__dataclass_fields__ if f not in own)
                where = f"@task on {own['handler']}"
                raise RegistryError(f"{where}: {exc}; the policy fields are {known}") from exc
            self.add(spec)
            return function

        return register

    def precondition(self, name: str, check: str, description: str = "") -> Precondition:
        if name in self._preconditions:
            raise RegistryError(f"precondition {name!r} is registered twice")
        if not NAME_RE.match(name) or not OBJECT_PATH_RE.match(check):
            raise RegistryError(f"precondition {name!r}: check must be 'package.module:function'")
        condition = Precondition(name=name, check=check, description=description)
        self._preconditions[name] = condition
        return condition

    def get(self, task_id: str, caller: str | None = None, grants: Grants | None = None) -> TaskSpec | None:
        """The spec, or None when it does not exist, is not exposed to ``caller`` (None = internal) or
        is outside ``grants`` (an agent's, ``tasks/grants.py``; None = no narrowing)."""
        spec = self._current().get(task_id) or _OWN_BY_ID.get(task_id)
        if spec is None or (caller is not None and not spec.exposed(caller)):
            return None
        # (tether's own code, asking with no caller and no grants, sees every task)
        if (caller is not None or grants is not None) and not allowed(task_id, grants):
            return None
        return spec

    def spec(self, task_id: str) -> TaskSpec:
        """The spec regardless of exposure (for tether's own code); ``ToolNotFound`` if unknown."""
        spec = self._current().get(task_id) or _OWN_BY_ID.get(task_id)
        if spec is None:
            raise ToolNotFound(f"no task {task_id!r} is registered", task_id=task_id)
        return spec

    def for_caller(self, caller: str, grants: Grants | None = None) -> list[TaskSpec]:
        """The tasks ``caller`` may reach within ``grants``: its own, then the two control tasks."""
        every = (*self._current().values(), *OWN_SPECS)
        return [spec for spec in every if spec.exposed(caller) and allowed(spec.task_id, grants)]

    def __iter__(self) -> Iterator[TaskSpec]:
        """The tasks added to it, in order (``get`` and ``for_caller`` also answer the control tasks)."""
        return iter(self._current().values())

    def __len__(self) -> int:
        return len(self._current())

    def unmet(self, spec: TaskSpec, home: Path) -> str | None:
        """The first unmet precondition of ``spec`` as a sentence, else None."""
        for name in spec.requires:
            check: PreconditionCheck = load_object(self._preconditions[name].check)
            reason = check(home)
            if reason:
                return reason
        return None

    def similar(self, task_id: str, caller: str, limit: int = 3, grants: Grants | None = None) -> list[str]:
        import difflib

        names = [spec.task_id for spec in self.for_caller(caller, grants)]
        return difflib.get_close_matches(task_id, names, n=limit, cutoff=0.6)

    @staticmethod
    def load(ref: str) -> Registry:
        registry = load_object(ref)
        if not isinstance(registry, Registry):
            raise RegistryError(f"{ref!r} is a {type(registry).__name__}, not a tether Registry")
        return registry


# -- the tasks the executor answers itself -----------------------------------------------------------
# Registry tasks like any other (listed, granted, validated, admitted) that no worker runs: ``jobs.status``
# and ``jobs.stop`` look at or stop another job; ``memory.remember`` notes a fact for the agent of the
# conversation that calls it (it needs the store and the caller's thread, which only the executor has).
CONTROL = frozenset({JOBS_STATUS, JOBS_STOP})
OWN = CONTROL | {REMEMBER}


class JobRef(BaseModel):
    """One job, by the execution id a call returned (a unique prefix of at least 4 characters will do)."""

    model_config = ConfigDict(extra="forbid")

    execution_id: str = Field(
        min_length=1, max_length=80, description="the execution_id a tool call or `tether job list` gave"
    )


class Fact(BaseModel):
    """One thing learned about the person, in a sentence."""

    model_config = ConfigDict(extra="forbid")

    fact: str = Field(
        min_length=1,
        max_length=500,
        description="what you learned about the person, in one sentence (a preference, a name, …)",
    )


def in_the_executor(*_: Any) -> None:
    raise RuntimeError("jobs.status and jobs.stop are answered by the executor, never by a worker")


OWN_SPECS = (
    TaskSpec(
        task_id=JOBS_STATUS,
        handler="tether.tasks.spec:in_the_executor",
        params=JobRef,
        description="Current status, progress and result of a job by execution_id. Never waits for a lock.",
        resources=(),
        idempotent=True,
        isolation=Isolation.INLINE,
        exposed_to=EVERYONE,
    ),
    TaskSpec(
        task_id=JOBS_STOP,
        handler="tether.tasks.spec:in_the_executor",
        params=JobRef,
        description="Stop a running job by execution_id: cooperatively, then by force. Takes no lock.",
        resources=(),
        idempotent=True,
        isolation=Isolation.INLINE,
        exposed_to=EVERYONE,
    ),
    TaskSpec(
        task_id=REMEMBER,
        handler="tether.tasks.spec:in_the_executor",
        params=Fact,
        description=(
            "Note one thing you learned about the person (a preference, a name, a standing instruction) so "
            "that you remember it in later conversations. Only what they told you; not in a private thread."
        ),
        aliases=("remember", "note that", "keep in mind", "记住", "记一下", "记下来", "别忘了"),
        resources=(),
        isolation=Isolation.INLINE,
        exposed_to=frozenset({AGENT}),
    ),
)
_OWN_BY_ID = {spec.task_id: spec for spec in OWN_SPECS}
