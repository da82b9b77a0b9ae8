"""The OpenAPI document matches reality: schemathesis drives every operation of a live ``tether serve``
with generated input, valid and deliberately broken, and finds no server error and no response outside
the document; its command line runs every check it has (methods a path does not take, ``Allow``
headers, valid data accepted, invalid data refused) over its examples, coverage and fuzzing phases.
The event stream is left out (it never ends); ``test_api`` covers it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
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
    auth = {"Authorization": f"Bearer {served.token}"}
    schema = schemathesis.openapi.from_url(f"{base}/api/openapi.json", headers=auth)
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
            case.call_and_validate(base_url=base, checks=CHECKS, timeout=30, headers=auth)

        try:
            exercise()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # an operation with no input to break
            continue
        exercised += 1
    assert exercised >= 20 if mode is GenerationMode.POSITIVE else exercised >= 15


METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# A 400 is this API's answer to a well-formed request that cannot be done as asked (a goal no task
# matches, a `before` that is no page's `next`): the document says so, and the message says why.
SCHEMATHESIS_TOML = """
[checks.positive_data_acceptance]
expected-statuses = ["2XX", "400", "401", "404", "409"]
"""


def _concrete(path: str) -> str:
    """A path of the document with each parameter filled in (the route matches; the thing need not exist)."""
    filled = {"thread_id": "th-none", "pending_id": "q-1", "execution_id": "nojob1234", "run_id": "run-none",
              "task_id": "t-1", "artifact_id": "1", "name": "nobody", "memory_id": "1",
              "decision_id": "1"}  # fmt: skip
    for name, value in filled.items():
        path = path.replace("{" + name + "}", value)
    assert "{" not in path, path
    return path


def test_a_method_a_path_does_not_take_is_405_with_every_method_it_does_take(served: Served) -> None:
    document = served.get("/api/openapi.json")
    checked = 0
    for path, operations in document["paths"].items():
        documented = {method.upper() for method in operations}
        for method in METHODS:
            if method in documented:
                continue
            answer = served.http.request(method, _concrete(path))
            assert answer.status_code == 405, (method, path, answer.status_code, answer.text)
            allowed = {part.strip() for part in answer.headers.get("allow", "").split(",") if part.strip()}
            assert allowed == documented, (method, path, answer.headers.get("allow"))
            assert answer.json()["detail"]["code"] == "method_not_allowed"
            checked += 1
    assert checked >= 60
    # The page itself, and its own files (which answer HEAD too).
    for path, allow in (("/", "GET"), ("/static/app.css", "GET, HEAD")):
        answer = served.http.post(path, json={})
        assert answer.status_code == 405 and answer.headers["allow"] == allow, (path, answer.headers)


@pytest.mark.timeout(300)
def test_schemathesis_runs_every_check_over_its_examples_coverage_and_fuzzing(
    served: Served, tmp_path: Path
) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(SCHEMATHESIS_TOML, encoding="utf-8")
    auth = [f"--header=Authorization: Bearer {served.token}"] if served.token else []
    command = [
        str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(config), "run",
        f"http://127.0.0.1:{served.port}/api/openapi.json", "--checks", "all", "--phases",
        "examples,coverage,fuzzing", "--exclude-path", "/api/events", "--max-examples", "10",
        "--generation-deterministic", "--continue-on-failure", "--workers", "1", "--no-color",
        "--request-timeout", "30", *auth,
    ]  # fmt: skip
    ran = subprocess.run(command, capture_output=True, text=True, timeout=280, cwd=tmp_path)
    report = ran.stdout[-12_000:] + ran.stderr[-2_000:]
    assert ran.returncode == 0, report
    tested = re.search(r"Tested: (\d+)", report)
    assert tested is not None and int(tested.group(1)) >= 27, report  # the operations, not just the document
    with httpx.Client() as client:  # and it ran against this server, which is still well
        assert client.get(f"{served.base}/static/app.css").status_code == 200
