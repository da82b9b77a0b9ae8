"""A task in one function (``@registry.task``): its spec comes from the signature and the docstring, and
it runs like every task — validated, in its own worker, stoppable — through the same executor."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from tests.support import function_tools
from tests.support.function_tools import HEAVY, registry
from tether import Registry, TaskContext
from tether.errors import RegistryError
from tether.execution.executor import Executor
from tether.tasks.result import TaskStatus


@pytest.fixture
def tools(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor(registry)


def test_the_spec_comes_from_the_signature_the_docstring_and_the_decorator() -> None:
    spec = registry.spec("robot.clean")
    assert spec.handler == "tests.support.function_tools:clean"
    assert spec.description == "Vacuum one room."
    assert spec.aliases == ("打扫", "vacuum") and spec.resources == ("robot",) and spec.timeout_s == 600
    assert spec.exposed_to == {"agent", "cli"}  # the one-function form is meant to be called
    assert spec.params is not None
    schema = spec.params.model_json_schema()
    assert schema["required"] == ["room"] and "ctx" not in schema["properties"]
    passes = schema["properties"]["passes"]
    assert passes["minimum"] == 1 and passes["maximum"] == 5 and passes["default"] == 1
    assert passes["description"] == "how many times to go over it, once by default"
    assert schema["properties"]["room"]["labels"] == {"zh": "房间"}
    wipe = registry.spec("wipe")
    assert wipe.danger == "destructive" and wipe.resources == ()
    assert wipe.params is not None and wipe.params.model_json_schema()["properties"]["mode"]["enum"] == [
        "quick",
        "full",
    ]
    assert function_tools.wipe(Path("/x/y")) == "wiped y (quick, PosixPath)"  # still a plain function


def test_it_runs_in_its_own_worker_and_heavy_imports_stay_there(tools: Executor) -> None:
    result = tools.execute_sync("robot.clean", {"room": "kitchen", "passes": 2}, caller="agent")
    assert result.status is TaskStatus.COMPLETED, result
    assert result.message == "clean" and result.data == {"room": "kitchen", "passes": 2, "heavy_here": True}
    assert HEAVY not in sys.modules  # the function's body ran in the worker, not here


def test_its_values_are_validated_with_the_allowed_ones_named(tools: Executor) -> None:
    alias = tools.execute_sync("robot.clean", {"room": "厨房"}, caller="agent")
    assert alias.status is TaskStatus.REJECTED and "allowed: kitchen, garage" in alias.message
    too_many = tools.execute_sync("robot.clean", {"room": "garage", "passes": 9}, caller="agent")
    assert too_many.status is TaskStatus.REJECTED and "passes" in too_many.message
    extra = tools.execute_sync("robot.clean", {"room": "garage", "ctx": 1}, caller="agent")
    assert extra.status is TaskStatus.REJECTED  # the context is never an argument


def test_policy_from_the_decorator_holds_destructive_needs_consent(tools: Executor, tmp_path: Path) -> None:
    asked = tools.execute_sync("wipe", {"folder": str(tmp_path)}, caller="agent")
    assert asked.status is TaskStatus.REJECTED and asked.data.get("needs_confirmation")
    call = {"folder": str(tmp_path), "mode": "full"}
    consent = tools.confirm("wipe", call, caller="cli", source="person:test")
    done = tools.execute_sync("wipe", call, caller="cli", confirmation=consent)
    assert done.status is TaskStatus.COMPLETED and done.message == f"wiped {tmp_path.name} (full, PosixPath)"


def test_a_background_function_is_stopped_like_any_job(tools: Executor) -> None:
    started = tools.execute_sync("robot.patrol", caller="cli")
    assert started.status is TaskStatus.RUNNING, started
    stopped = asyncio.run(tools.jobs.stop(started.execution_id, reason="test"))
    assert stopped.status is TaskStatus.STOPPED, stopped


def test_an_async_inline_function_gets_its_context_by_the_name_ctx(tools: Executor) -> None:
    result = tools.execute_sync("ping", {"word": "hi"}, caller="cli")
    assert result.status is TaskStatus.COMPLETED and result.data["word"] == "hi"
    assert result.data["task"] == "ping" and result.data["inline"] is True
    failed = tools.execute_sync("ping", {"word": "fail"}, caller="cli")
    assert failed.status is TaskStatus.FAILED and failed.message == "asked to fail"


def _lone(ctx: TaskContext, n: int) -> None:
    return None


def test_what_cannot_be_a_task_is_refused_with_what_to_change() -> None:
    r = Registry(ref="tests.tasks.test_function_tasks:r")

    def nested(n: int) -> None:
        return None

    with pytest.raises(RegistryError, match="top level of an importable module"):
        r.task()(nested)
    with pytest.raises(RegistryError, match=r"the policy fields are .*danger"):
        r.task("t.lone", dangr="safe")(_lone)
    with pytest.raises(RegistryError, match=r"not its parameters"):
        r.task("t.lone", catalogs={"room": function_tools.ROOMS})(_lone)
    with pytest.raises(RegistryError, match="needs a type annotation"):
        r.task("t.untyped")(_untyped)
    with pytest.raises(RegistryError, match=r"\*args"):
        r.task("t.star")(_star)
    r.task("t.lone")(_lone)
    with pytest.raises(RegistryError, match="registered twice"):
        r.task("t.lone")(_lone)


def _untyped(ctx: TaskContext, n) -> None:
    return None


def _star(*rooms: str) -> None:
    return None


def test_annotated_constraints_and_defaults_validate_as_written() -> None:
    r = Registry(ref="tests.tasks.test_function_tasks:r")
    r.task("t.sized")(_sized)
    params: Any = r.spec("t.sized").params
    assert params.model_validate({"name": "ab"}).count == 3
    with pytest.raises(Exception, match="at least 2"):
        params.model_validate({"name": "a"})


def _sized(name: Annotated[str, Field(min_length=2)], count: int = 3) -> None:
    return None


def test_tether_tasks_shows_what_the_docstring_says_of_each_parameter(home: Path) -> None:
    from tests.support.helpers import tether_cli

    code, out, err = tether_cli("--registry", "tests.support.function_tools:registry", "tasks", home=home)
    assert code == 0, err
    text = " ".join(out.split())
    assert "robot.clean safe · process · robot Vacuum one room." in text
    assert "room (required): kitchen, garage — the room to clean" in text
    assert "passes (default 1): integer 1–5 — how many times to go over it, once by default" in text
