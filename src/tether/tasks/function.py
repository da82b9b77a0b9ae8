"""A task in one function: ``@registry.task(...)`` turns a typed function into a ``TaskSpec``.

The function's signature is the parameter model (names, types, defaults, ``Annotated`` constraints such
as ``Field(ge=1)`` or ``InCatalog(...)``, ``Literal`` choices); its docstring's first paragraph is the
description and a Google-style ``Args:`` section describes the parameters. A parameter annotated
``TaskContext`` (or named ``ctx``) receives the worker's context. Policy (danger, resources, exposure,
aliases, …) goes in the decorator's arguments, exactly as on a ``TaskSpec``.

Nothing changes below the spec: the handler is ``"module:function"``, imported inside the worker (so a
heavy library imported in the function's body is imported there only), validated and run through the
same executor as every task. The decorator returns the function unchanged: it stays callable as written.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from tether.errors import RegistryError
from tether.tasks.catalog import Catalog, InCatalog
from tether.tasks.context import TaskContext

MARK = "__tether_task__"  # set on the function: the parameter that takes the context, or ""
CTX_NAME = "ctx"
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters|参数)\s*[:：]\s*$")
_ARG_LINE = re.compile(r"^\s{2,}(\*{0,2}\w+)\s*(\([^)]*\))?\s*[:：]\s*(.*)$")


def task_spec_kwargs(
    function: Callable[..., Any],
    *,
    task_id: str | None,
    description: str | None,
    catalogs: Mapping[str, Catalog],
    labels: Mapping[str, Mapping[str, str]],
) -> dict[str, Any]:
    """The ``TaskSpec`` fields the function itself gives: its id, handler, parameter model and
    description. Raises ``RegistryError`` naming what to change when it cannot be a task."""
    name = getattr(function, "__qualname__", "")
    module = getattr(function, "__module__", "")
    where = f"@task on {name or function!r}"
    if not inspect.isfunction(function):
        raise RegistryError(f"{where}: decorate a plain function (def or async def)")
    if module == "__main__" or "<locals>" in name or "." in name:
        raise RegistryError(
            f"{where}: define it at the top level of an importable module (not in the script you run, "
            "not inside a function or class): workers import it by its 'module:function' path"
        )
    doc = inspect.getdoc(function) or ""
    summary, described = _read_docstring(doc)
    context, params = _params_model(function, where, described, catalogs, labels)
    function.__dict__[MARK] = context  # type: ignore[index]
    return {
        "task_id": task_id or function.__name__,
        "handler": f"{module}:{name}",
        "params": params,
        "description": description if description is not None else summary,
    }


def _params_model(
    function: Callable[..., Any],
    where: str,
    described: Mapping[str, str],
    catalogs: Mapping[str, Catalog],
    labels: Mapping[str, Mapping[str, str]],
) -> tuple[str, type[BaseModel] | None]:
    """(the parameter that takes the context or "", the model of the others, or None without any)."""
    try:
        hints = get_type_hints(function, include_extras=True)
    except Exception as exc:  # a forward reference that does not resolve, a typo in an annotation
        raise RegistryError(f"{where}: its annotations cannot be read: {type(exc).__name__}: {exc}") from exc
    context = ""
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        hint = hints.get(parameter.name, inspect.Parameter.empty)
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise RegistryError(f"{where}: *args, **kwargs and positional-only parameters cannot be filled")
        if hint is TaskContext or (parameter.name == CTX_NAME and hint is inspect.Parameter.empty):
            context = parameter.name
            continue
        if hint is inspect.Parameter.empty:
            raise RegistryError(f"{where}: parameter {parameter.name!r} needs a type annotation")
        if parameter.name in catalogs:
            hint = Annotated[hint, InCatalog(catalog=catalogs[parameter.name])]
        extra: dict[str, Any] = {}
        if parameter.name in labels:
            extra["json_schema_extra"] = {"labels": dict(labels[parameter.name])}
        if parameter.name in described:
            extra["description"] = described[parameter.name]
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (Annotated[hint, Field(**extra)] if extra else hint, default)
    unknown = (set(catalogs) | set(labels)) - set(fields)
    if unknown:
        raise RegistryError(f"{where}: catalogs/labels name {sorted(unknown)}, which are not its parameters")
    if not fields:
        return context, None
    model_name = "".join(part.capitalize() for part in function.__name__.split("_")) + "Params"
    try:
        model = create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as exc:  # a type pydantic cannot validate
        raise RegistryError(f"{where}: its parameters cannot be validated: {exc}") from exc
    return context, model


def _read_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(the first paragraph, {parameter: description}) from a Google-style docstring."""
    summary = " ".join(doc.split("\n\n", 1)[0].split())
    described: dict[str, str] = {}
    inside = False
    current = ""
    for line in doc.splitlines():
        if _ARGS_HEADER.match(line):
            inside = True
            continue
        if not inside:
            continue
        if line.strip() and not line.startswith(" "):
            break  # the next section
        match = _ARG_LINE.match(line)
        if match and len(line) - len(line.lstrip()) <= 4:
            current = match.group(1).lstrip("*")
            described[current] = match.group(3).strip()
        elif current and line.strip():
            described[current] = f"{described[current]} {line.strip()}"
    return summary, described


def is_function_task(handler: object) -> bool:
    return callable(handler) and MARK in getattr(handler, "__dict__", {})


def invoke(handler: Callable[..., Any], ctx: Any) -> object:
    """Call a decorated function the way its signature asks: its validated parameters by name, and the
    context where it takes one. Values keep their validated types (``Path``, enums, models)."""
    params = ctx.params
    kwargs = {name: getattr(params, name) for name in type(params).model_fields} if params else {}
    context = handler.__dict__[MARK]
    if context:
        kwargs[context] = ctx
    return handler(**kwargs)
