"""Two tether homes (installations) on one database: runs, turns and DBOS workflows stay their own home's.

Home B runs in a PID namespace of its own (another host, as far as processes go; see
``tests/support/homes.py``). What must hold: B's executor never runs, continues or recovers a run of A's
(not from the queue, not at start-up, not when A's executor died, even when both homes have the same
path), B never interrupts or takes over a turn A is in, and A's own executor then finishes A's work,
each effect once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PG_REQUIRED_ENV, fresh_pg_database, pg_problem
from tests.support.flowkit import ledger
from tests.support.helpers import ROOT, wait_for
from tests.support.homes import Homes, two_homes

FLOWS = "tests.support.flowkit:flows"
pytestmark = pytest.mark.timeout(300)

START_RUN = """
import json, sys
from tests.support.flowkit import flows
from tether.runtime import Runtime
from tether.supervisor import service
from tether.supervisor.plan import Plan
args = {"key": sys.argv[1], **({"until_file": sys.argv[2]} if sys.argv[2:] else {})}
plan = Plan.model_validate({"caller": "cli", "tasks": [
    {"id": "t1", "call": {"task": "f.once", "args": args}}
]})
with Runtime.open() as rt:
    print(json.dumps(service.start(rt, flows, plan).run_id))
"""

HOLD_TURN = """
import json, sys, time
from tether.execution import process
from tether.runtime import Runtime
from tether.supervisor.conversations import alive
me = process.current()
with Runtime.open() as rt:
    turn = rt.threads.begin_turn(sys.argv[1], "from A", (me.pid, me.create_time), alive)
    print(json.dumps(turn), flush=True)
    time.sleep(600)
"""

SEGMENT = """
import json, sys
from tether.runtime import Runtime
from tether.supervisor import durable
with Runtime.open() as rt, durable.client(rt) as c:
    (found,) = c.list_workflows(workflow_ids=[sys.argv[1]], load_input=False, load_output=False)
    print(json.dumps({"status": found.status, "by": found.executor_id, "dequeued_at": found.dequeued_at}))
"""

SEGMENTS = """
import json, sys
from tether.runtime import Runtime
from tether.supervisor import durable
with Runtime.open() as rt, durable.client(rt) as c:
    found = c.list_workflows(workflow_id_prefix=sys.argv[1] + ".", load_input=False)
    print(json.dumps([[f.workflow_id, f.status, f.executor_id, str(f.output)[:300]] for f in found]))
"""

SETTLE_TURNS = """
import json, sys
from tether.execution import process
from tether.runtime import Runtime
from tether.supervisor.conversations import alive
me = process.current()
with Runtime.open() as rt:
    marked = rt.threads.interrupt_orphans(alive)
    began = rt.threads.begin_turn(sys.argv[1], "from B", (me.pid, me.create_time), alive)
    print(json.dumps({"marked": marked, "began": began}))
"""


@pytest.fixture
def homes(tmp_path: Path, database_url: str) -> Iterator[Homes]:
    with two_homes(tmp_path, database_url, FLOWS) as made:
        yield made


def show(homes: Homes, home: Path, run_id: str, *, isolated: bool = False) -> dict[str, Any]:
    found = homes.json(home, "flow", "show", run_id, isolated=isolated)
    assert isinstance(found, dict)
    return found


def start_run(
    homes: Homes, home: Path, key: str, *, held_until: str | None = None, isolated: bool = False
) -> str:
    """A run of one must-run-once step; with ``held_until``, the step holds on until the test makes
    that file in the home."""
    held = [held_until] if held_until is not None else []
    run_id = homes.python(home, START_RUN, key, *held, isolated=isolated)
    assert isinstance(run_id, str)
    return run_id


def until(check: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    wait_for(check, timeout=timeout, what=what)


def keys(home: Path) -> Counter[str]:
    return Counter(str(entry["key"]) for entry in ledger(home))


def untouched(run: dict[str, Any]) -> bool:
    return run["status"] == "running" and all(not t["steps"] for t in run["tasks"])


def test_an_executor_of_another_home_never_runs_nor_continues_its_runs(homes: Homes) -> None:
    theirs = start_run(homes, homes.a, "a-1")  # enqueued for A's executors; none runs yet
    homes.start(homes.b, "worker", isolated=True)
    # B's executor is up and working: its own run completes (its queue has been polled many times by then).
    own = start_run(homes, homes.b, "b-1", isolated=True)
    until(lambda: show(homes, homes.b, own, isolated=True)["status"] == "completed", "B's own run")
    run = show(homes, homes.a, theirs)
    assert untouched(run), run
    assert keys(homes.b) == Counter({"b-1": 1}) and keys(homes.a) == Counter()

    worker = homes.start(homes.a, "worker", "--until-idle")
    until(lambda: show(homes, homes.a, theirs)["status"] == "completed", "A's run, by A's executor")
    assert keys(homes.a) == Counter({"a-1": 1}) and keys(homes.b) == Counter({"b-1": 1})
    worker.wait(timeout=120)


def test_another_home_never_interrupts_nor_takes_over_a_turn_in_progress(homes: Homes) -> None:
    command, env = homes.command(homes.a, [sys.executable, "-c", HOLD_TURN, "t-shared"])
    holder = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, start_new_session=True)
    homes.started.append(holder)
    assert holder.stdout is not None
    assert json.loads(holder.stdout.readline()) == 1  # A is in turn 1 of the thread, alive

    settled = homes.python(homes.b, SETTLE_TURNS, "t-shared", isolated=True)
    assert settled == {"marked": [], "began": None}, settled  # A's live turn: neither ended nor replaced
    holder.stdout.close()


def test_a_dead_executor_s_workflows_are_recovered_by_its_own_home_only_even_at_the_same_path(
    tmp_path: Path,
) -> None:
    """DBOS recovery re-dispatches a dead executor's pending workflows by executor id: B, with its home
    at A's path (the same ~/.tether on another host), must never take A's for its own."""
    problem = pg_problem()
    if problem is not None:
        if os.environ.get(PG_REQUIRED_ENV) == "1":
            pytest.fail(f"{PG_REQUIRED_ENV}=1 but {problem}")
        pytest.skip(f"NOT TESTED ON POSTGRESQL: {problem}")
    with fresh_pg_database() as url, two_homes(tmp_path, url, FLOWS, same_path=True) as homes:
        executor = homes.start(homes.a, "worker")
        # Launched (it announces itself after reconciling): a run recorded while an executor reconciles
        # may have its first segment superseded by the one the reconcile enqueues, harmlessly.
        log = homes.a / f"started-{len(homes.started) - 1}.log"
        until(
            lambda: log.exists() and "runs the flows" in log.read_text(errors="replace"),
            "A's executor to launch",
        )
        theirs = start_run(homes, homes.a, "a-slow", held_until="go")  # outlasts what B is given
        # Its worker began (the handler counts its tries first): a step recorded but not yet begun when
        # the executor dies is rightly given up and run anew, which is not what this test is about.
        until(lambda: (homes.a / "tries-a-slow").exists(), "A's step to begin in its worker")
        executor.kill()  # the executor only: the flow's worker is detached and goes on
        executor.wait(timeout=30)
        left = homes.python(homes.a, SEGMENT, f"{theirs}.0")
        said = json.dumps(
            [left, show(homes, homes.a, theirs), homes.python(homes.a, SEGMENTS, theirs)], default=str
        )
        assert isinstance(left, dict) and left["status"] == "PENDING", said

        homes.start(homes.b, "worker", isolated=True)
        own = start_run(homes, homes.b, "b-probe", isolated=True)
        until(lambda: show(homes, homes.b, own, isolated=True)["status"] == "completed", "B's own run")
        run = show(homes, homes.a, theirs)
        assert run["status"] == "running" and len(run["tasks"][0]["steps"]) == 1, run
        assert run["tasks"][0]["steps"][0]["status"] == "running", run
        assert "a-slow" not in keys(homes.b)
        assert homes.python(homes.a, SEGMENT, f"{theirs}.0") == left  # not recovered, not dequeued again

        # A's executor comes back: it recovers its own workflow and adopts the result.
        homes.start(homes.a, "worker", "--until-idle")
        (homes.a / "go").touch()  # the step that outlived A's first executor may end now
        until(lambda: show(homes, homes.a, theirs)["status"] == "completed", "A's run, recovered by A")
        assert keys(homes.a)["a-slow"] == 1
        assert len(show(homes, homes.a, theirs)["tasks"][0]["steps"]) == 1
