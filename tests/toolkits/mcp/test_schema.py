"""The boundary between a foreign server's JSON Schema and the executor's validation: a call passes
exactly when the schema accepts it (checked against ``jsonschema`` itself, by hypothesis), any schema
either becomes a parameter model or is refused naming the tool, and what passes is what is sent."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import validator_for

from tether.errors import ToolRejected
from tether.tasks.spec import TaskSpec
from tether.tasks.validation import validate_params
from tether.toolkits.mcp.schema import UnusableSchema, params_model

NAMES = ("name", "count", "tags", "mode", "json")  # "json" shadows a BaseModel method, and still works
json_scalars = (
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.floats(-1e6, 1e6) | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(NAMES), inner, max_size=3),
    max_leaves=8,
)

leaf_schemas = st.one_of(
    st.builds(lambda t: {"type": t}, st.sampled_from(["string", "integer", "number", "boolean", "null"])),
    st.builds(
        lambda low, high: {"type": "integer", "minimum": low, "maximum": high},
        st.integers(-5, 0),
        st.integers(0, 5),
    ),
    st.builds(lambda n: {"type": "string", "maxLength": n, "minLength": 1}, st.integers(1, 4)),
    st.builds(
        lambda values: {"enum": values}, st.lists(st.text(max_size=3), min_size=1, max_size=3, unique=True)
    ),
    st.builds(lambda values: {"enum": values}, st.lists(json_scalars, min_size=1, max_size=3)),
    st.builds(lambda: {"type": "array", "items": {"type": "integer"}, "maxItems": 2}),
    st.builds(
        lambda s: {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": s}]}, st.integers(-2, 2)
    ),
    st.just({}),
)


@st.composite
def object_schemas(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    schema: dict[str, Any] = {"type": "object", "properties": {n: draw(leaf_schemas) for n in names}}
    schema["required"] = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    if draw(st.booleans()) and len(names) > 1:
        schema["dependentRequired"] = {names[0]: [names[1]]}
    if draw(st.booleans()):
        schema["minProperties"] = draw(st.integers(0, 2))
    return schema


def spec_for(schema: dict[str, Any]) -> TaskSpec:
    return TaskSpec(
        task_id="mcp.fuzz.tool", handler="x.y:z", params=params_model("mcp.fuzz.tool", "tool", schema)
    )


@settings(max_examples=300, deadline=None)
@given(schema=object_schemas(), data=st.data())
def test_a_call_passes_exactly_when_the_servers_schema_accepts_it(
    schema: dict[str, Any], data: st.DataObject
) -> None:
    properties = list(schema["properties"])
    drawn = data.draw(st.dictionaries(st.sampled_from(properties), json_values, max_size=len(properties)))
    instance: dict[str, Any] = dict(drawn)
    spec = spec_for(schema)
    expected = validator_for(schema)(schema).is_valid(instance)
    try:
        validated = validate_params(spec, instance)
    except ToolRejected as exc:
        assert not expected, f"refused a call the schema accepts: {exc.message}"
        assert exc.message.startswith("mcp.fuzz.tool: ")
        return
    assert expected, f"passed a call the schema refuses: {instance}"
    assert validated is not None
    assert validated.model_dump(mode="json") == instance  # exactly what was given is sent


@settings(max_examples=300, deadline=None)
@given(
    schema=st.dictionaries(
        st.sampled_from(["type", "properties", "required", "items", "enum", "$ref"]), json_values
    )
)
def test_any_schema_becomes_a_model_or_is_refused_naming_the_tool(schema: dict[str, Any]) -> None:
    try:
        model = params_model("mcp.fuzz.tool", "tool", schema)
    except UnusableSchema as exc:
        assert exc.message.startswith("mcp.fuzz.tool (the server's tool 'tool'): ")
        return
    assert model.model_json_schema() == schema


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"type": "array"}, "not a JSON Schema of type object"),
        ([1, 2], "not a JSON Schema of type object"),
        ({"type": "object", "properties": {"x": {"type": "bogus"}}}, "not valid JSON Schema"),
        (
            {"type": "object", "properties": {"file-path": {}}},
            "parameter names ['file-path'] cannot be passed",
        ),
        ({"type": "object", "properties": {"model_config": {}}}, "cannot be passed"),
    ],
)
def test_an_unusable_schema_is_refused_naming_the_tool_and_why(schema: Any, why: str) -> None:
    with pytest.raises(UnusableSchema, match=r"mcp\.s\.t \(the server's tool 'T'\)") as caught:
        params_model("mcp.s.t", "T", schema)
    assert why in caught.value.message


def test_refusals_name_the_parameter_and_the_allowed_values() -> None:
    schema = {
        "type": "object",
        "properties": {
            "mode": {"enum": ["short", "full"]},
            "n": {"$ref": "#/$defs/small"},
        },
        "$defs": {"small": {"type": "integer", "maximum": 3}},
        "required": ["mode"],
    }
    spec = spec_for(schema)
    with pytest.raises(ToolRejected) as caught:
        validate_params(spec, {"mode": "long"})
    assert "mode:" in caught.value.message and caught.value.data["allowed"] == ["short", "full"]
    with pytest.raises(ToolRejected, match="n: 9 is greater than the maximum of 3"):
        validate_params(spec, {"mode": "short", "n": 9})  # a $ref is resolved in the whole schema
    with pytest.raises(ToolRejected, match="unknown parameter 'x'; parameters are: mode, n"):
        validate_params(spec, {"mode": "short", "x": 1})


def test_parameter_words_are_plain_and_calls_are_still_checked_by_the_servers_schema() -> None:
    """Review: a parameter's description and title reached the model and `tether tasks --json` with
    the escape sequences and right-to-left overrides the server put in them."""
    schema = {
        "type": "object",
        "title": "Paint\x9b2J",
        "properties": {
            "color": {"type": "string", "description": "the \x1b[5mcolor\u202e", "title": "Co\x07lor"},
            "description": {"type": "string", "enum": ["\x1b"]},  # a parameter called description
            "at": {"$ref": "#/$defs/place"},
        },
        "$defs": {"place": {"type": "integer", "description": "where\u2066", "maximum": 3}},
    }
    model = params_model("mcp.s.paint", "paint", schema)
    shown = model.model_json_schema()
    assert shown["title"] == "Paint2J"
    assert shown["properties"]["color"] == {"type": "string", "description": "the [5mcolor", "title": "Color"}
    assert shown["properties"]["description"] == {"type": "string", "enum": ["\x1b"]}  # a value, kept
    assert shown["$defs"]["place"]["description"] == "where"
    assert model.model_fields["color"].description == "the [5mcolor"
    spec = TaskSpec(task_id="mcp.s.paint", handler="x.y:z", params=model)
    assert validate_params(spec, {"description": "\x1b", "at": 2}) is not None
    with pytest.raises(ToolRejected, match="at: 9 is greater than the maximum of 3"):
        validate_params(spec, {"at": 9})
