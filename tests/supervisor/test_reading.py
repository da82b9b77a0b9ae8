"""What the engine reads of a run for a decision (``supervisor/reading.py``): the first decision of a
process reads the run with its plan in one read; the next ones read the head and the tasks that moved,
never the plan again while its version holds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.statements import statements
from tether.runtime import Runtime
from tether.supervisor.reading import forget, plan_of, read_for_decide


def _plan(statement: str) -> bool:
    return re.search(r'runs\."?plan"?,', statement) is not None


@pytest.fixture
def runtime(home: Path) -> Iterator[Runtime]:
    with Runtime.open(home) as opened:
        yield opened


def test_a_decision_reads_the_plan_with_the_run_once(runtime: Runtime) -> None:
    """Study of a run's cost: a segment's first decision read the run, then its plan in a transaction
    of its own."""
    from tether.tasks.spec import Registry

    tasks = [{"id": "a", "call": {"task": "x.y"}}, {"id": "b", "call": {"task": "x.y"}, "depends_on": ["a"]}]
    runtime.runs.create("r-plan", goal="g", plan={"caller": "cli", "tasks": tasks}, caller="cli")
    h: Any = SimpleNamespace(runtime=runtime, executor=SimpleNamespace(registry=Registry()))
    forget("r-plan")
    with statements(runtime.db.engine) as first:
        run = read_for_decide(h, "r-plan")
        assert run is not None
        known = plan_of(h, run)
    assert [t.id for t in known.plan.tasks] == ["a", "b"]
    selects = [s for s in first if s.startswith("SELECT")]
    assert len(selects) == 2 and _plan(selects[0]) and "FROM run_tasks" in selects[1], selects
    with statements(runtime.db.engine) as then:  # the plan is known: the head alone, and nothing moved
        run = read_for_decide(h, "r-plan")
        assert run is not None and plan_of(h, run) is known
    reads = [s for s in then if s.startswith("SELECT")]
    assert len(reads) == 1 and not _plan(reads[0]), then
