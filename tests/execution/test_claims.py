"""An inline call claimed in its caller's transaction (``Executor.claim_in``, used by ``supervisor/
eager.py``): it runs once, only as this executor claimed it, and a claim its caller gives up ends as
never started instead of a record that says ``running`` for as long as the process lives."""

from __future__ import annotations

import asyncio

import pytest

from tether.errors import ConfigError
from tether.execution.executor import Executor
from tether.execution.inline import Claim, Journal
from tether.tasks.result import TaskStatus


def _claim(executor: Executor, execution_id: str) -> Claim:
    with executor.runtime.db.write() as conn:
        claim = executor.claim_in(
            conn, "t.ids_inline", None, caller="agent", grants=None, origin="run:r-1",
            step_id="r-1/a/1", execution_id=execution_id, started=lambda _: None,
        )  # fmt: skip
    assert claim is not None
    return claim


def _journal() -> Journal:
    return Journal(started=lambda _: None, ended=lambda _conn, _record: None)


def test_a_claim_runs_once_and_a_made_up_one_never(support: Executor) -> None:
    claim = _claim(support, "c1a100000000000aaaa")
    record = support.store.get(claim.execution_id)
    assert record is not None and record.status is TaskStatus.RUNNING and record.origin == "run:r-1"
    result = asyncio.run(support.run_claimed(claim, _journal()))
    assert result.status is TaskStatus.COMPLETED
    with pytest.raises(ConfigError, match="ran already"):
        asyncio.run(support.run_claimed(claim, _journal()))
    forged = Claim(claim.admitted, "c1a100000000000bbbb", "agent", claim.where)  # admitted, never claimed
    with pytest.raises(ConfigError, match="not a claim of this executor"):
        asyncio.run(support.run_claimed(forged, _journal()))
    assert support.store.get(forged.execution_id) is None


def test_a_claim_given_up_ends_never_started_and_cannot_run_after(support: Executor) -> None:
    claim = _claim(support, "c1a100000000000cccc")
    support.give_up(claim)
    record = support.store.get(claim.execution_id)
    assert record is not None and record.status is TaskStatus.FAILED and record.data.get("never_started")
    with pytest.raises(ConfigError):
        asyncio.run(support.run_claimed(claim, _journal()))


def test_a_call_that_needs_more_than_its_arguments_is_not_claimed(support: Executor) -> None:
    """``jobs.status`` (the executor's own), a task in a worker, an id on record: ``execute`` takes them."""
    with support.runtime.db.write() as conn:
        for task_id, eid in (("jobs.status", "c1a100000000000dddd"), ("t.ids", "c1a100000000000eeee")):
            got = support.claim_in(
                conn, task_id, {"execution_id": "x"} if task_id == "jobs.status" else None, caller="agent",
                grants=None, origin="run:r-1", step_id="r-1/a/1", execution_id=eid, started=lambda _: None,
            )  # fmt: skip
            assert got is None
    _claim(support, "c1a100000000000ffff")
    with support.runtime.db.write() as conn:
        again = support.claim_in(
            conn, "t.ids_inline", None, caller="agent", grants=None, origin="run:r-1", step_id="r-1/a/1",
            execution_id="c1a100000000000ffff", started=lambda _: None,
        )  # fmt: skip
    assert again is None
