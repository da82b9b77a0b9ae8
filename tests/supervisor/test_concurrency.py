"""``[cluster] concurrency``: an executor runs at most that many runs and turns at once, so a backlog
spreads over the executors instead of going whole to the first that polls.

Before it, the installation's queue had no per-executor limit: with two workers, every run of a backlog
went to whichever worker looked first, and the other stood idle (a bench with 2 and 4 workers drained a
backlog slower than one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.supervisor.test_executors import _flow
from tests.support.helpers import tether_cli, wait_for
from tests.support.workers import FLOWS, Worker

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
RELEASE = "release"


@pytest.fixture(autouse=True)
def one_at_a_time(home: Path) -> Path:
    with (home / "settings.toml").open("a", encoding="utf-8") as settings:
        settings.write("[cluster]\nconcurrency = 1\n")
    return home


def _start(home: Path, flow: Path) -> str:
    code, out, err = tether_cli(
        "--registry", FLOWS, "flow", "run", str(flow), "--detach", "--json", home=home
    )
    assert code == 0, out + err
    return str(json.loads(out)["run_id"])


def _segments(home: Path, run_ids: list[str]) -> list[tuple[str, str | None]]:
    """Each run's current segment: its DBOS status and the executor it is pending under."""
    from tether.runtime import Runtime
    from tether.supervisor import durable

    found = []
    with Runtime.open(home) as runtime, durable.client(runtime) as client:
        for run_id in run_ids:
            run = runtime.runs.get(run_id)
            assert run is not None
            status = client.list_workflows(workflow_ids=[durable.segment_id(run_id, run.segment)])
            found.append((status[0].status, status[0].executor_id) if status else ("?", None))
    return found


def _all_completed(home: Path, run_ids: list[str]) -> bool:
    for run_id in run_ids:
        _, shown, _ = tether_cli("--registry", FLOWS, "flow", "show", run_id, "--json", home=home)
        if json.loads(shown)["status"] != "completed":
            return False
    return True


def test_a_backlog_spreads_over_two_executors(home: Path, tmp_path: Path, workers: list[Worker]) -> None:
    workers += [Worker(home), Worker(home)]
    flow = _flow(tmp_path, 1, 0, held_until=RELEASE)  # each run holds on until the test says
    runs = [_start(home, flow), _start(home, flow)]
    # Both run at once, one on each executor: neither took the whole backlog.
    wait_for(
        lambda: (
            (found := _segments(home, runs))
            and all(status == "PENDING" for status, _ in found)
            and {executor for _, executor in found} == {w.executor_id for w in workers}
        ),
        timeout=60,
        what="each executor running one of the two runs",
    )
    (home / RELEASE).touch()
    wait_for(lambda: _all_completed(home, runs), timeout=60, what="both runs completed")


def test_an_executor_runs_no_more_than_its_concurrency(
    home: Path, tmp_path: Path, workers: list[Worker]
) -> None:
    workers.append(Worker(home))
    flow = _flow(tmp_path, 1, 0, held_until=RELEASE)
    runs = [_start(home, flow), _start(home, flow)]
    wait_for(
        lambda: sorted(status for status, _ in _segments(home, runs)) == ["ENQUEUED", "PENDING"],
        timeout=60,
        what="one run under way, the other waiting in the queue",
    )
    for _ in range(3):  # and stays so, look after look (each longer than a poll of the queue)
        assert sorted(status for status, _ in _segments(home, runs)) == ["ENQUEUED", "PENDING"]
    (home / RELEASE).touch()
    wait_for(lambda: _all_completed(home, runs), timeout=60, what="both runs completed, one after the other")
