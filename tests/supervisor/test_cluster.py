"""Several hosts on one PostgreSQL: each a network namespace of its own (``tests/support/hosts.py``)
with a home joined to one installation, running ``tether worker``s; this test's process is the host
where a person types commands.

What is promised and checked here, with real processes, links and kills:
- a call for a resource runs on the host that owns it, from anywhere; one nobody owns is refused at
  once, or waits when asked; another version's worker is not a worker for this version's calls;
- a job on another host is stopped, and its log read, from here;
- a host killed mid-flow: its work is taken over by another, nothing runs twice, the one arm is never
  moved by two hosts at once, no run is left running, no job is lost; a host restarted under another
  application version takes nothing of this version over;
- a host cut off stops its work on its resources and exits before another host takes them over.

The counts go to the session's fault table (``tests/support/figures.py``); every "twice" must be 0.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fresh_pg_database, pg_problem
from tests.support.figures import count as record_figure
from tests.support.flowkit import ledger
from tests.support.helpers import wait_for
from tests.support.hosts import Host, available, run, settle
from tether.execution import process
from tether.installation import installation_id, join
from tether.runtime import Runtime
from tether.store.workers import WorkerStore
from tether.supervisor import service
from tether.supervisor.plan import Plan

FLOWS = "tests.support.flowkit:flows"
REG = ["--registry", FLOWS]
HEARTBEAT_S, LEASE_S = 0.25, 3.0
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow, pytest.mark.xdist_group("hosts")]
FAST_STOPS = {
    "TETHER_STOP_GRACE_COOPERATIVE_S": "0.5",
    "TETHER_STOP_GRACE_INTERRUPT_S": "0.5",
    "TETHER_DRAIN_S": "3",
}


@dataclass
class Cluster:
    here: Path  # the home of this (the test's) host
    env: dict[str, str]
    settings: str
    base: Path
    hosts: list[Host] = field(default_factory=list)

    def host(self, name: str) -> Host:
        made = Host(
            name, len(self.hosts) + 1, self.base / name, self.settings.replace("{node}", name), self.env
        )
        self.hosts.append(made)
        join(made.home, installation_id(self.here))
        return made

    def worker(self, host: Host, *args: str, version: str | None = None) -> subprocess.Popen[bytes]:
        out = self.base / f"{host.name}-worker-{len(host.procs)}.out"  # one per start: its own line
        proc = host.start([*REG, "worker", *args], out, version=version, **FAST_STOPS)
        wait_for(
            lambda: "runs the flows" in out.read_text(errors="replace") or proc.poll() is not None, timeout=90
        )
        assert proc.poll() is None, out.read_text(errors="replace")[-3000:]
        return proc

    def tether(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run(self.here, {**self.env, **FAST_STOPS}, *REG, *args, timeout=timeout)

    def follow(self, *args: str) -> subprocess.Popen[str]:
        """A ``tether`` command here, left running (a person waiting on it)."""
        env = {
            **os.environ,
            **self.env,
            **FAST_STOPS,
            "TETHER_HOME": str(self.here),
            "TETHER_CLI_SERVER": "0",
        }
        command = [sys.executable, "-m", "tether.interfaces.cli", *REG, *args]
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def runtime(self) -> Runtime:
        return Runtime.open(self.here)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    problem = available() or pg_problem()
    if problem is not None:
        if os.environ.get("TETHER_TEST_REQUIRE_NETNS") == "1":
            pytest.fail(f"TETHER_TEST_REQUIRE_NETNS=1 but {problem}")
        pytest.skip(f"NOT TESTED ON SEVERAL HOSTS: {problem}")
    from sqlalchemy.engine import make_url

    with fresh_pg_database() as url:
        parsed = make_url(url)
        monkeypatch.setenv("TETHER_API_KEY_DATABASE", parsed.password or "")  # this process's runtimes
        where = f"{parsed.username}@{{db_host}}:{parsed.port or 5432}/{parsed.database}"
        template = (
            f'[store]\ndatabase_url = "postgresql+psycopg://{where}"\n'
            f'[cluster]\nnode = "{{node}}"\nheartbeat_s = {HEARTBEAT_S}\nlease_s = {LEASE_S}\n'
        )
        here = tmp_path / "here"
        here.mkdir()
        (here / "settings.toml").write_text(
            template.replace("{db_host}", "127.0.0.1").replace("{node}", "here")
        )
        made = Cluster(
            here=here,
            env={"TETHER_API_KEY_DATABASE": parsed.password or ""},
            settings=template,
            base=tmp_path,
        )
        try:
            yield made
        finally:
            for host in made.hosts:
                host.close()


def _result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise AssertionError(
            f"not one JSON document: {done.stdout[-2000:]!r} {done.stderr[-2000:]!r}"
        ) from None


def _end(command: subprocess.Popen[str]) -> None:
    """A command the test gave up on: killed, and its pipes closed (not left to a later test's garbage)."""
    if command.poll() is None:
        command.kill()
    command.communicate(timeout=30)


def _job(rt: Runtime, execution_id: str) -> Any:
    found = rt.jobs.get(execution_id)
    assert found is not None, execution_id
    return found


def _keys(home: Path) -> list[str]:
    return [entry["key"] for entry in ledger(home)]


def test_a_call_runs_on_the_host_that_owns_its_resource_and_is_stopped_and_read_from_here(
    cluster: Cluster,
) -> None:
    b = cluster.host("b")
    cluster.worker(b, "--resources", "arm")

    moved = _result(cluster.tether("task", "run", "f.arm", "--params", '{"key": "k1"}', "--json"))
    assert moved["status"] == "completed", moved
    assert _keys(b.home) == ["k1"] and _keys(cluster.here) == []  # the arm is b's
    with cluster.runtime() as rt:
        assert _job(rt, moved["execution_id"]).host == "b"
    here = _result(cluster.tether("task", "run", "f.safe", "--params", '{"key": "k2"}', "--json"))
    assert here["status"] == "completed" and _keys(cluster.here) == ["k2"]  # claims nothing owned: runs here

    follower = cluster.follow(  # a person waits for a long move of b's arm, here
        "task", "run", "f.arm", "--json", "--params", '{"key": "long", "until_file": "never"}'
    )
    try:
        with cluster.runtime() as rt:
            job = wait_for(lambda: next(iter(rt.jobs.list(active=True, limit=5)), None), timeout=60)
        assert job.host == "b"
        logged = wait_for(
            lambda: (
                "long: working" in _result(cluster.tether("job", "log", job.execution_id, "--json"))["text"]
            ),
            timeout=30,
        )
        assert logged
        stopped = _result(cluster.tether("job", "stop", job.execution_id, "--json"))
        assert stopped["status"] == "stopped", stopped
        out, _ = follower.communicate(timeout=60)
        assert json.loads(out)["status"] == "stopped"
    finally:
        _end(follower)
    assert "long" not in _keys(b.home)

    # A person who waited for a move here is killed (SIGKILL: no word to anyone): the move stops on b,
    # as a job whose starter died does on one host, once b finds its caller silent for a lease.
    killed = cluster.follow(
        "task", "run", "f.arm", "--json", "--params", '{"key": "orphan", "until_file": "never"}'
    )
    try:
        with cluster.runtime() as rt:
            job = wait_for(
                lambda: next(
                    (j for j in rt.jobs.list(active=True, limit=5) if j.status.value == "running"), None
                ),
                timeout=60,
            )
    finally:
        killed.kill()
        killed.communicate(timeout=30)
    ended = wait_for(
        lambda: (
            (found := _result(cluster.tether("job", "status", job.execution_id, "--json")))["status"]
            != "running"
            and found
        ),
        timeout=60,
    )
    assert ended["status"] == "stopped" and "stopped waiting for it" in ended["message"], ended
    assert "orphan" not in _keys(b.home)


def test_a_resource_nobody_owns_is_refused_at_once_or_waited_for_when_asked(cluster: Cluster) -> None:
    b = cluster.host("b")
    worker = cluster.worker(b, "--resources", "arm")
    worker.terminate()
    assert settle(worker) is not None

    refused = _result(cluster.tether("task", "run", "f.arm", "--params", '{"key": "k1"}', "--json"))
    assert refused["status"] == "rejected"
    assert "no worker owns arm now" in refused["message"] and "b's worker stopped" in refused["message"]

    old = cluster.worker(b, "--resources", "arm", version="tether-flows-0")  # an older tether
    other = _result(cluster.tether("task", "run", "f.arm", "--params", '{"key": "k2"}', "--json"))
    assert other["status"] == "rejected" and "no worker of this version" in other["message"], other
    old.terminate()
    settle(old)

    waiting = cluster.follow(
        "task", "run", "f.arm", "--wait-owner", "120", "--json", "--params", '{"key": "k3"}'
    )
    try:
        cluster.worker(b, "--resources", "arm")
        out, err = waiting.communicate(timeout=120)
    finally:
        _end(waiting)
    assert json.loads(out)["status"] == "completed", err
    assert _keys(b.home) == ["k3"]


def _arm_plan(keys: list[str]) -> Plan:
    tasks = [
        {"id": key, "call": {"task": "f.arm", "args": {"key": key, "until_file": f"go-{key}"}},
         **({"depends_on": [keys[i - 1]]} if i else {})}
        for i, key in enumerate(keys)
    ]  # fmt: skip
    return Plan.model_validate({"goal": "move the arm step by step", "tasks": tasks})


def _overlaps(entries: list[dict[str, Any]]) -> int:
    """Moves of the one arm that overlapped in time, across every host's ledger."""
    spans = sorted((e["began"], e["ended"]) for e in entries)
    return sum(1 for (_, end), (start, _) in itertools.pairwise(spans) if start < end)


def test_a_host_killed_mid_flow_is_taken_over_and_nothing_runs_twice(cluster: Cluster) -> None:
    b, c = cluster.host("b"), cluster.host("c")
    cluster.worker(b, "--resources", "arm")
    cluster.worker(c, "--resources", "arm")
    with cluster.runtime() as rt:
        peers = WorkerStore(rt.db)
        holder = wait_for(lambda: peers.holders().get("arm", ("", 0))[0], timeout=30)
        victim, standby = (b, c) if holder.startswith("b/") else (c, b)
        keys = [f"k{n}" for n in range(6)]
        # Each move waits for its go-ahead in the home of the host that makes it: the holder may make
        # the first two, and dies in the third; the standby may make them all.
        for key in keys:
            (standby.home / f"go-{key}").touch()
        for key in keys[:2]:
            (victim.home / f"go-{key}").touch()
        record = service.start(rt, _registry(), _arm_plan(keys))

        def third_under_way() -> Any:  # running, and its worker said so: the move has begun
            for job in rt.jobs.list(active=True, limit=5):
                log = victim.home / "executions" / job.execution_id / "worker.log"
                said = log.exists() and "k2: working" in log.read_text(errors="replace")
                if job.host == victim.name and job.params.get("key") == "k2" and said:
                    return job
            return None

        third = wait_for(third_under_way, timeout=120, what="the third move under way on the holder")
        victim.kill()
        killed_at = time.time()
        # The dead host comes back under another application version (an upgrade): it runs only its
        # version's work, and takes nothing of this version over (its old incarnation's included).
        cluster.worker(victim, version="tether-flows-0")
        asked = wait_for(
            lambda: _waiting(rt, record.run_id), timeout=120, what="the unknown move asked about"
        )
        assert asked == "k2" and _job(rt, third.execution_id).data.get("interrupted")
        # The person checks the world (the ledgers): the third move never happened, so it may run again.
        assert "k2" not in _keys(victim.home)
        service.answer(
            rt, _registry(), record.run_id, "k2", "approve", reason="checked: the arm did not move"
        )
        run = wait_for(lambda: _ended(rt, record.run_id), timeout=120, what="the run to end")
        entries = [*ledger(b.home), *ledger(c.home), *ledger(cluster.here)]
        done = [e["key"] for e in entries]
        twice = len(done) - len(set(done))
        late = [e for e in ledger(victim.home) if e["began"] > killed_at]
        active = rt.jobs.list(active=True, limit=100)
    record_figure("hosts killed mid-flow", 1)
    record_figure("tasks run twice after a host was killed", twice)
    record_figure("arm moves overlapping across hosts (held twice) after a kill", _overlaps(entries))
    record_figure("runs left running after a host was killed", 0 if run.status != "running" else 1)
    record_figure("jobs lost (left running) after a host was killed", len(active))
    record_figure("work taken over by a worker of another version", len(late))
    assert run.status == "completed", run.message
    assert sorted(done) == keys and twice == 0 and _overlaps(entries) == 0 and not active and not late
    assert _keys(standby.home) == keys[2:]


def _waiting(rt: Runtime, run_id: str) -> str | None:
    run = rt.runs.get(run_id)
    waiting = [t.task_id for t in run.tasks if t.status == "waiting_for_human"] if run is not None else []
    return waiting[0] if waiting else None


def _ended(rt: Runtime, run_id: str) -> Any:
    run = rt.runs.get(run_id)
    return run if run is not None and run.status in ("completed", "failed", "cancelled") else None


def _registry() -> Any:
    from tests.support.flowkit import flows

    return flows


def test_a_host_cut_off_stops_its_work_before_another_takes_its_resource(cluster: Cluster) -> None:
    b, c = cluster.host("b"), cluster.host("c")
    first = cluster.worker(b, "--resources", "arm")
    with cluster.runtime() as rt:
        peers = WorkerStore(rt.db)
        wait_for(lambda: peers.holders().get("arm", ("", 0))[0].startswith("b/"), timeout=30)
        cluster.worker(c, "--resources", "arm")
        follower = cluster.follow(
            "task", "run", "f.arm", "--json", "--params", '{"key": "cut", "until_file": "never"}'
        )
        try:
            job = wait_for(lambda: next(iter(rt.jobs.list(active=True, limit=5)), None), timeout=60)
            worker_pid = wait_for(lambda: _job(rt, job.execution_id).pid, timeout=30)
            job_ref = process.ref_of(worker_pid)
            b.cut()
            taken: list[bool] = []

            def c_holds() -> bool:
                holder, left = peers.holders().get("arm", ("", 0.0))
                if holder.startswith("c/") and left > 0:
                    # At the moment another host holds the arm, the cut-off one has let it go.
                    taken.append(
                        first.poll() is not None and (job_ref is None or not process.is_alive(job_ref))
                    )
                    return True
                return False

            wait_for(c_holds, timeout=60, what="the standby takes the arm")
            out, _ = follower.communicate(timeout=120)
        finally:
            _end(follower)
        outcome = json.loads(out)
        b.heal()
        cluster.worker(b, "--resources", "arm")  # back from the partition: it joins again, as a standby
        alive = {w.node for w in peers.workers(alive_only=True)}
    record_figure("hosts cut off holding a resource", 1)
    record_figure("resources held twice across a partition", 0 if taken == [True] else 1)
    assert first.returncode == 75, "the cut-off worker fenced itself"
    assert taken == [True]
    assert outcome["status"] == "failed" and outcome["data"].get("interrupted"), outcome
    assert "cut" not in _keys(b.home) and alive == {"b", "c"}


def test_a_worker_asked_to_stop_lets_its_call_finish_then_stops_the_next_and_hands_it_on(
    cluster: Cluster,
) -> None:
    b, c = cluster.host("b"), cluster.host("c")
    first = cluster.worker(b, "--resources", "arm")
    with cluster.runtime() as rt:
        peers = WorkerStore(rt.db)
        wait_for(lambda: peers.holders().get("arm", ("", 0))[0].startswith("b/"), timeout=30)
        standby = cluster.worker(c, "--resources", "arm")

        def under_way(key: str) -> Any:
            found = [j for j in rt.jobs.list(active=True, limit=5) if j.params.get("key") == key]
            return found[0] if found else None

        # Asked to stop while a move is under way: b takes nothing new, and the move finishes there.
        follower = cluster.follow("task", "run", "f.arm", "--json", "--params", _gated("drained"))
        wait_for(lambda: under_way("drained"), timeout=60)
        first.terminate()
        (b.home / "go-drained").touch()
        out, _ = follower.communicate(timeout=120)
        assert json.loads(out)["status"] == "completed" and _keys(b.home) == ["drained"]
        assert settle(first, 60) is not None
        wait_for(lambda: peers.holders().get("arm", ("", 0))[0].startswith("c/"), timeout=30)

        # c asked to stop with a move that does not finish within its drain: the move is stopped on
        # record, and whoever waits for the call hears it from b, which takes c's work over at once.
        cluster.worker(b, "--resources", "arm")
        follower = cluster.follow("task", "run", "f.arm", "--json", "--params", _gated("late"))
        wait_for(lambda: under_way("late"), timeout=60)
        standby.terminate()
        out, _ = follower.communicate(timeout=120)
        outcome = json.loads(out)
        assert outcome["status"] == "stopped" and "its worker stopped" in outcome["message"], outcome
        assert "late" not in _keys(c.home)


def _gated(key: str) -> str:
    return json.dumps({"key": key, "until_file": f"go-{key}"})
