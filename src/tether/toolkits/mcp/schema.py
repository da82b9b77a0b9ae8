"""A parameter model from a foreign server's JSON Schema: what the executor validates a call with
before anything runs, and what the model and the caller see as the tool's schema.

Every declared property becomes a field (a string ``enum`` a ``Literal``, so a refusal lists the
allowed values); its value is checked against the property's own schema by ``jsonschema`` (its
``$ref``\\ s resolved in the whole schema), then the whole call against the root for what spans
properties (``required``, ``dependentRequired``, ``anyOf`` …). Only declared properties pass: an
argument the schema does not name is refused, whatever ``additionalProperties`` says. Arguments left
out stay out of what is sent (the server's defaults apply). ``model_json_schema()`` is the server's
schema itself, its words for people (``title``, ``description``, ``$comment``) made plain
(``names.plain``): the model and ``tether tasks`` read them, and they take no part in validation.

A schema that cannot be used — not an object schema, not valid JSON Schema, a property name that
cannot be a parameter — is ``UnusableSchema`` naming the tool and why; that tool is not imported.
"""

from __future__ import annotations

import copy
import keyword
import warnings
import weakref
from collections.abc import Mapping
from typing import Annotated, Any, Literal, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_serializer
from pydantic import model_validator as model_check
from pydantic_core import PydanticCustomError

from tether.errors import RegistryError
from tether.toolkits.mcp import names

SDK_MISSING = "the MCP SDK is not installed: pip install 'tether[mcp]'"
MAX_PROPERTIES = 200


class UnusableSchema(RegistryError):
    """A tool's input schema that tether cannot validate calls against."""

    code = "unusable_schema"


class ForeignParams(BaseModel):
    """The base of every imported tool's parameter model."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    @model_serializer(mode="wrap")
    def _given_only(self, handler: Any) -> dict[str, Any]:
        dumped = cast(dict[str, Any], handler(self))
        return {name: value for name, value in dumped.items() if name in self.model_fields_set}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cast(dict[str, Any], _SCHEMAS[cls]))


# The server's schema, per model class (a class attribute would become a field).
_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], Mapping[str, Any]] = weakref.WeakKeyDictionary()


WORDS = frozenset({"title", "description", "$comment"})  # annotations: shown, never validated


def _plain_words(node: Any) -> Any:
    """``node`` (a schema or a part of one) with the text of its words for people made plain. A
    property named ``description`` is a schema, not a string: it is looked into, not cleaned."""
    if isinstance(node, Mapping):
        return {
            key: names.plain(value) if key in WORDS and isinstance(value, str) else _plain_words(value)
            for key, value in cast(Mapping[str, Any], node).items()
        }
    if isinstance(node, list):
        return [_plain_words(item) for item in cast(list[Any], node)]
    return node


def _validator(schema: Mapping[str, Any]) -> Any:
    try:
        from jsonschema.validators import validator_for
    except ImportError as exc:
        raise UnusableSchema(f"cannot check a tool's arguments: {SDK_MISSING}") from exc
    cls = validator_for(schema)
    return cls(schema)


def _reason(errors: list[Any]) -> str:
    from jsonschema.exceptions import best_match

    error = best_match(errors)
    assert error is not None
    where = "".join(f"[{part!r}]" if isinstance(part, int) else f".{part}" for part in error.path)
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    return f"{where.lstrip('.')}: {message}" if where else message


def _property_check(root: Any, subschema: Any) -> AfterValidator:
    def check(value: Any) -> Any:
        errors = list(root.evolve(schema=subschema).iter_errors(value))
        if errors:
            raise PydanticCustomError("json_schema", "{reason}", {"reason": _reason(errors)})
        return value

    return AfterValidator(check)


def _whole_check(root: Any) -> Any:
    def check(model: BaseModel) -> BaseModel:
        given = model.model_dump(mode="json")
        errors = [error for error in root.iter_errors(given) if not error.path]
        if errors:
            raise PydanticCustomError("json_schema", "{reason}", {"reason": _reason(errors)})
        return model

    return model_check(mode="after")(check)


def _usable_name(name: str) -> bool:
    reserved = name.startswith("model_")  # pydantic's own namespace
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_") and not reserved


def params_model(task_id: str, tool_name: str, schema: object) -> type[BaseModel]:
    """The parameter model of one imported tool; ``UnusableSchema`` naming it when there is none."""
    where = f"{task_id} (the server's tool {tool_name!r})"
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        raise UnusableSchema(f"{where}: its inputSchema is not a JSON Schema of type object")
    schema = cast(Mapping[str, Any], schema)
    root = _validator(schema)
    from jsonschema.exceptions import SchemaError

    try:
        type(root).check_schema(schema)
    except SchemaError as exc:
        raise UnusableSchema(f"{where}: its inputSchema is not valid JSON Schema: {exc.message}") from exc
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or len(properties) > MAX_PROPERTIES:
        raise UnusableSchema(f"{where}: its inputSchema has no usable properties")
    bad = sorted(name for name in properties if not _usable_name(name))
    if bad:
        raise UnusableSchema(
            f"{where}: parameter names {bad} cannot be passed through tether (a name must be an identifier"
            " that starts with neither '_' nor 'model_')"
        )
    fields: dict[str, Any] = {}
    for name, subschema in properties.items():
        kind: Any = Any
        enum = subschema.get("enum") if isinstance(subschema, Mapping) else None
        if isinstance(enum, list) and enum and all(isinstance(value, str) for value in enum):
            kind = Literal[tuple(enum)]  # type: ignore[valid-type]
        described = subschema.get("description") if isinstance(subschema, Mapping) else None
        annotated = Annotated[kind, _property_check(root, subschema)]
        text = names.plain(described) if isinstance(described, str) else None
        # Left out, an optional argument stays out of the call (None is only the absent marker: a
        # null the caller sends is checked against the schema like any value).
        default = ... if name in required else None
        fields[name] = (annotated, Field(default, description=text))
    model_name = "Params_" + task_id.replace(".", "_")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a parameter called "json" or "copy" shadows BaseModel's own
        model = create_model(
            model_name,
            __base__=ForeignParams,
            __validators__={"_whole": _whole_check(root)},
            **fields,
        )
    _SCHEMAS[model] = _plain_words(schema)  # calls are checked by ``root``: the server's own
    return model
