"""Parameter validation at the trust boundary: limits, then strict pydantic types, then the domain
catalogs.

Params are JSON: at most ``MAX_PARAMS_BYTES`` encoded and ``MAX_PARAMS_DEPTH`` levels deep, with finite
numbers only. Types are strict (``true`` is not a number, ``"3"`` is not an integer). Every rejection names
the parameter and, where the value was wrong, the values allowed for it in ``data["allowed"]`` so that a
model (or a person) can correct itself in one step; no rejection echoes more than a short excerpt of
what it was given.
"""

from __future__ import annotations

import enum
import json
import typing
from collections.abc import Mapping
from typing import Any

import annotated_types
from pydantic import BaseModel, ValidationError

from tether.errors import ToolRejected
from tether.tasks.catalog import InCatalog
from tether.tasks.spec import TaskSpec

MAX_SHOWN_VALUE = 80
MAX_PARAMS_BYTES = 64 * 1024
MAX_PARAMS_DEPTH = 32


def _depth(value: object, limit: int) -> int:
    """Nesting depth of a JSON-like value, counted without recursion and without going past ``limit``."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend((child, level + 1) for child in typing.cast(Any, children))
    return deepest


def _refuse(spec: TaskSpec, why: str) -> ToolRejected:
    return ToolRejected(f"{spec.task_id}: {why}", errors=[{"param": None, "message": why}])


def encode_params(spec: TaskSpec, raw: object) -> str:
    """``raw`` as JSON text within the limits, or ``ToolRejected`` saying which limit it broke."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ToolRejected(
            f"{spec.task_id}: params must be an object of name → value, got {type(raw).__name__}",
            errors=[{"param": None, "message": "params must be an object"}],
        )
    if _depth(raw, MAX_PARAMS_DEPTH) > MAX_PARAMS_DEPTH:
        raise _refuse(spec, f"params are nested more than {MAX_PARAMS_DEPTH} levels deep")
    try:
        encoded = json.dumps(raw, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        raise _refuse(spec, "params must be JSON: NaN and infinite numbers are not allowed") from exc
    except TypeError as exc:
        raise _refuse(
            spec, f"params must be JSON values (strings, numbers, booleans, lists, objects): {exc}"
        ) from exc
    size = len(encoded.encode("utf-8", errors="surrogatepass"))
    if size > MAX_PARAMS_BYTES:
        raise _refuse(spec, f"params are {size} bytes of JSON; the limit is {MAX_PARAMS_BYTES}")
    try:
        encoded.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _refuse(spec, "params contain text that is not valid Unicode (a lone surrogate)") from exc
    return encoded


def validate_params(spec: TaskSpec, raw: object) -> BaseModel | None:
    """The validated params model of ``spec`` (None for a task without params), or ``ToolRejected``."""
    encoded = encode_params(spec, raw)
    raw = typing.cast(Mapping[str, Any], raw or {})
    model = spec.params
    if model is None:
        if raw:
            names = [str(_shown(str(name))) for name in raw]
            raise ToolRejected(
                f"{spec.task_id} takes no parameters (got {', '.join(names[:5])})",
                errors=[{"param": name, "message": "unexpected parameter"} for name in names[:20]],
                allowed_params=[],
            )
        return None

    known = list(model.model_fields)
    unknown = [str(_shown(str(name))) for name in raw if name not in model.model_fields]
    if unknown:
        raise ToolRejected(
            f"{spec.task_id}: unknown parameter {', '.join(map(repr, unknown[:5]))}; "
            f"parameters are: {', '.join(known) or 'none'}",
            errors=[{"param": name, "message": "unknown parameter"} for name in unknown[:20]],
            allowed_params=known,
        )
    try:
        # JSON mode, strictly: the types JSON has, no coercion between them (true is not 1, "3" not 3).
        params = model.model_validate_json(encoded, strict=True)
    except ValidationError as exc:
        raise _rejection(spec, model, exc) from exc
    return _check_catalogs(spec, params)


def _rejection(spec: TaskSpec, model: type[BaseModel], exc: ValidationError) -> ToolRejected:
    errors: list[dict[str, Any]] = []
    for error in exc.errors(include_url=False):
        name = str(error["loc"][0]) if error["loc"] else None
        entry: dict[str, Any] = {"param": name, "message": error["msg"]}
        if error["type"] != "missing":
            entry["value"] = _shown(error.get("input"))
        if name is not None and name in model.model_fields:
            allowed = allowed_values(model, name)
            if allowed is not None:
                entry["allowed"] = allowed
            bounds = _bounds(model, name)
            if bounds:
                entry["range"] = bounds
        errors.append(entry)
    parts = []
    for entry in errors:
        text = f"{entry['param'] or 'params'}: {entry['message']}"
        if "value" in entry:
            text += f" (got {entry['value']!r})"
        if "allowed" in entry:
            text += f"; allowed: {', '.join(map(str, entry['allowed']))}"
        parts.append(text)
    data: dict[str, Any] = {"errors": errors, "param": errors[0]["param"]}
    first_allowed = next((entry["allowed"] for entry in errors if "allowed" in entry), None)
    if first_allowed is not None:
        data["allowed"] = first_allowed
    return ToolRejected(f"{spec.task_id}: " + "; ".join(parts), **data)


def _check_catalogs(spec: TaskSpec, params: BaseModel) -> BaseModel:
    updates: dict[str, Any] = {}
    for name, info in type(params).model_fields.items():
        marker = next((m for m in info.metadata if isinstance(m, InCatalog)), None)
        if marker is None:
            continue
        value = getattr(params, name)
        if value is None:
            continue
        parent = None
        if marker.depends_on is not None:
            parent = updates.get(marker.depends_on, getattr(params, marker.depends_on))
        catalog = marker.catalog_for(parent)
        if catalog is None:
            # The field it depends on holds no catalogued value; that field was already reported.
            continue
        text = str(value)
        if text in catalog:
            continue
        resolved = catalog.resolve(text)
        if resolved is not None and marker.aliases:
            updates[name] = resolved
            continue
        scope = f" for {marker.depends_on} {parent!r}" if marker.depends_on else ""
        message = f"{spec.task_id}: {name}: {text!r} is not an allowed value{scope}"
        data: dict[str, Any] = {"param": name, "value": _shown(text), "allowed": list(catalog.values)}
        if resolved is not None:
            message += f" (it is an alias of {resolved!r}: pass the canonical value)"
            data["suggestion"] = resolved
        message += f"; allowed: {', '.join(catalog.values)}"
        data["errors"] = [dict(data, message="not an allowed value")]
        raise ToolRejected(message, **data)
    return params.model_copy(update=updates) if updates else params


def allowed_values(model: type[BaseModel], name: str) -> list[Any] | None:
    """The closed set of values a field accepts (Literal, Enum or a flat catalog), else None."""
    info = model.model_fields[name]
    for marker in info.metadata:
        if isinstance(marker, InCatalog) and marker.depends_on is None:
            return list(marker.catalog_for(None).values)  # type: ignore[union-attr]
    annotation = info.annotation
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is typing.Literal:
            return list(typing.get_args(candidate))
        if isinstance(candidate, type) and issubclass(candidate, enum.Enum):
            return [member.value for member in candidate]
    return None


def _bounds(model: type[BaseModel], name: str) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    for marker in model.model_fields[name].metadata:
        for key in ("ge", "gt", "le", "lt", "min_length", "max_length"):
            if isinstance(marker, annotated_types.BaseMetadata) and hasattr(marker, key):
                bounds[key] = getattr(marker, key)
    return bounds


def _shown(value: object) -> object:
    if isinstance(value, str) and len(value) > MAX_SHOWN_VALUE:
        return value[:MAX_SHOWN_VALUE] + "…"
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_VALUE else text[:MAX_SHOWN_VALUE] + "…"
