from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tether.errors import ToolRejected
from tether.tasks.catalog import InCatalog
from tether.tasks.spec import TaskSpec
from tether.tasks.validation import validate_params
from tether.toolkits.demo.catalog import CALYX_GOLD, INSTANCE_NAMES, INSTANCE_TYPES
from tether.toolkits.demo.registry import registry

FARM = registry.spec("demo.farm_instance")
SALVAGE = registry.spec("demo.salvage_relics")
START = registry.spec("demo.start_game")


def rejected(spec: TaskSpec, params: object) -> ToolRejected:
    with pytest.raises(ToolRejected) as info:
        validate_params(spec, params)
    return info.value


def test_canonical_values_pass() -> None:
    params = validate_params(FARM, {"instance_type": CALYX_GOLD, "instance_name": "藏珍之蕾", "attempts": 3})
    assert params is not None
    assert params.model_dump() == {"instance_type": CALYX_GOLD, "instance_name": "藏珍之蕾", "attempts": 3}


@pytest.mark.parametrize("attempts", [True, "3", 3.0, "three", None])
def test_types_are_strict_json_types(attempts: object) -> None:
    """true is not 1 and "3" is not 3: the caller learns the type instead of the system guessing."""
    exc = rejected(FARM, {"instance_type": CALYX_GOLD, "instance_name": "藏珍之蕾", "attempts": attempts})
    assert exc.data["param"] == "attempts" and exc.data["errors"][0]["range"] == {"ge": 1, "le": 99}


def test_params_beyond_the_limits_are_refused_without_being_echoed() -> None:
    from tether.tasks.validation import MAX_PARAMS_BYTES, MAX_PARAMS_DEPTH

    huge = "x" * (MAX_PARAMS_BYTES + 1)
    for params, why in [
        ({"instance_type": huge}, "bytes of JSON"),
        ({huge: 1}, "bytes of JSON"),
        ({"attempts": float("nan")}, "NaN"),
        ({"attempts": {1, 2}}, "JSON values"),
        ({"x": [[[[[[]]]]]] * 2, "deep": _nested(MAX_PARAMS_DEPTH + 5)}, "nested"),
        ({"instance_type": "\udcff"}, "surrogate"),
    ]:
        exc = rejected(FARM, params)
        assert why in exc.message, (why, exc.message[:200])
        assert len(exc.message) < 300 and len(repr(exc.data)) < 1000
    many = {f"unknown_{i}_{'y' * 5000}": i for i in range(12)}
    exc = rejected(FARM, many)
    assert len(exc.message) < 1000 and len(exc.data["errors"]) <= 20


def _nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


def test_alias_is_rejected_with_allowed_values_and_a_suggestion() -> None:
    exc = rejected(FARM, {"instance_type": CALYX_GOLD, "instance_name": "金币"})
    assert exc.data["param"] == "instance_name"
    assert exc.data["allowed"] == ["回忆之蕾", "以太之蕾", "藏珍之蕾"]
    assert exc.data["suggestion"] == "藏珍之蕾"
    assert "instance_name" in exc.message and "藏珍之蕾" in exc.message


def test_name_from_another_type_lists_the_names_of_the_given_type() -> None:
    exc = rejected(FARM, {"instance_type": CALYX_GOLD, "instance_name": "毁灭之蕾"})
    assert exc.data["allowed"] == list(INSTANCE_NAMES[CALYX_GOLD].values)
    assert "suggestion" not in exc.data


def test_unknown_type_lists_the_types() -> None:
    exc = rejected(FARM, {"instance_type": "金", "instance_name": "藏珍之蕾"})
    assert exc.data["param"] == "instance_type"
    assert exc.data["allowed"] == list(INSTANCE_TYPES.values)


def test_aliases_map_only_where_the_spec_allows_it() -> None:
    class Lenient(BaseModel):
        instance_type: Annotated[str, InCatalog(catalog=INSTANCE_TYPES, aliases=True)]
        instance_name: Annotated[
            str, InCatalog(catalog=INSTANCE_NAMES, depends_on="instance_type", aliases=True)
        ]

    spec = TaskSpec(task_id="x.lenient", handler="x:y", params=Lenient)
    params = validate_params(spec, {"instance_type": "golden calyx", "instance_name": "gold"})
    assert params is not None
    assert params.model_dump() == {"instance_type": CALYX_GOLD, "instance_name": "藏珍之蕾"}


def test_out_of_range_names_the_range() -> None:
    exc = rejected(FARM, {"instance_type": CALYX_GOLD, "instance_name": "藏珍之蕾", "attempts": 100})
    assert exc.data["param"] == "attempts"
    assert exc.data["errors"][0]["range"] == {"ge": 1, "le": 99}
    assert "100" in exc.message


def test_literal_rejection_lists_allowed_values() -> None:
    exc = rejected(SALVAGE, {"rarity": 5})
    assert exc.data["allowed"] == [2, 3, 4]
    assert "rarity" in exc.message


@pytest.mark.parametrize("raw", [[1, 2], "attempts=3", 7])
def test_params_must_be_an_object(raw: object) -> None:
    assert "must be an object" in rejected(FARM, raw).message


def test_unknown_and_missing_parameters_are_named() -> None:
    exc = rejected(FARM, {"instance_type": CALYX_GOLD, "instance_name": "藏珍之蕾", "times": 3})
    assert "'times'" in exc.message and exc.data["allowed_params"] == [
        "instance_type",
        "instance_name",
        "attempts",
    ]
    exc = rejected(FARM, {"instance_type": CALYX_GOLD})
    assert exc.data["param"] == "instance_name"
    assert "takes no parameters" in rejected(START, {"x": 1}).message


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from([CALYX_GOLD, "藏珍之蕾", "金币", "gold", "毁灭之蕾", "0", "99", "1e3", ""]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
param_dicts = st.dictionaries(
    st.sampled_from(["instance_type", "instance_name", "attempts", "extra", ""]), values, max_size=4
)


@settings(max_examples=400, deadline=None)
@given(param_dicts)
def test_fuzzed_params_are_either_valid_or_rejected_with_a_reason(raw: dict[str, Any]) -> None:
    try:
        params = validate_params(FARM, raw)
    except ToolRejected as exc:
        assert exc.message and isinstance(exc.data.get("errors"), list)
        return
    assert params is not None
    assert params.instance_type in INSTANCE_TYPES  # type: ignore[attr-defined]
    assert params.instance_name in INSTANCE_NAMES[params.instance_type]  # type: ignore[attr-defined]
    assert 1 <= params.attempts <= 99  # type: ignore[attr-defined]
