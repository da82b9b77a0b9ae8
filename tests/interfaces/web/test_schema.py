"""The OpenAPI document matches reality: schemathesis drives every operation of a live ``tether serve``
with generated input, valid and deliberately broken, and finds no server error and no response outside
the document. The event stream is left out (it never ends); ``test_api`` covers it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import _kill_game
from tests.support.webserver import Served, serving

pytestmark = pytest.mark.slow
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("web-schema") / "home"
    home.mkdir()
    with serving(home, TETHER_DEMO_STEP_S="0.01") as server:
        yield server
    _kill_game(home)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_api_matches_its_openapi_document(served: Served, mode: GenerationMode) -> None:
    base = f"http://127.0.0.1:{served.port}"
    schema = schemathesis.openapi.from_url(f"{base}/api/openapi.json")
    operations = [cast(Any, result).ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    exercised = 0
    for operation in operations:
        if operation.path == "/api/events":
            continue

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=10,
            deadline=None,
            suppress_health_check=cast(Any, list(HealthCheck)),
            derandomize=True,
        )
        def exercise(case: schemathesis.Case) -> None:
            case.call_and_validate(base_url=base, checks=CHECKS, timeout=30)

        try:
            exercise()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # an operation with no input to break
            continue
        exercised += 1
    assert exercised >= 20 if mode is GenerationMode.POSITIVE else exercised >= 15
