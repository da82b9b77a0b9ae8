"""Where a call runs when its installation spans several hosts.

A worker started with ``--resources desktop-1`` owns ``desktop-1`` (``store/workers.py``): a call that
claims it runs only where it is held. Resources no worker ever declared stay what they are on one host,
locks of the node that runs the call. For a call that claims an owned resource:

- **here** when this node's worker holds it (the node's ``flock`` serializes it with that worker's own
  jobs), or when this node declares it and nobody holds it;
- **forward** to the resource's queue otherwise: the executor hands the admitted call (validated, its
  consent checked) to ``Forwarder``, which the supervisor supplies (DBOS), and the holder runs it under
  the same execution id;
- **nobody** when no live worker owns it: refused at once with what to do ("no worker owns desktop-1"),
  or, when the caller asked to wait, once its wait is over.

The executor never runs a forwarded call without a forwarder: it refuses and says why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from tether.store.workers import ALIVE, LOST, WorkerRecord, WorkerStore, live_owners
from tether.tasks.result import TaskResult

VIEW_TTL_S = 1.0  # how stale this executor's view of who owns what may be
WAIT_POLL_S = 0.25


@dataclass(frozen=True, slots=True, kw_only=True)
class Forwarded:
    """An admitted call on its way to the node that holds its resource (JSON-safe)."""

    task_id: str
    params: dict[str, Any]
    caller: str
    execution_id: str
    grants: list[list[str]] | None = None
    confirmation: dict[str, str] | None = None
    detach: bool = False
    origin: str | None = None
    step_id: str | None = None
    from_node: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Forwarded:
        return cls(**{k: value[k] for k in cls.__dataclass_fields__ if k in value})


class Forwarder(Protocol):
    """Hands a call to the holder of ``resource`` and follows it to its result (or, for a background
    call, its handshake). ``on_start(execution_id)`` once the job is on record."""

    version: str  # the application version this executor's workflows run under

    async def __call__(
        self, call: Forwarded, resource: str, on_start: Callable[[str], None] | None
    ) -> TaskResult: ...


Verdict = Literal["here", "forward", "nobody"]


@dataclass(frozen=True, slots=True)
class Placed:
    verdict: Verdict
    resource: str = ""
    message: str = ""


@dataclass(slots=True)
class _View:
    at: float = -1e9
    declared: set[str] = field(default_factory=set)
    workers: list[WorkerRecord] = field(default_factory=list)
    holders: dict[str, tuple[str, float]] = field(default_factory=dict)


class Placement:
    """One executor's answer to "where does a call claiming these resources run"."""

    def __init__(
        self, peers: WorkerStore, forwarder: Forwarder | None = None, home: str = "", lease_s: float = 10.0
    ) -> None:
        self.peers = peers
        self.home = home
        self.lease_s = lease_s
        # In an executor process: whether it holds a resource now (``cluster.Member.may_take``). Only
        # the holder runs a call for an owned resource; every other process forwards it to the holder,
        # which is then the parent of its job (a job it did not start could outlive its hold).
        self.holds: Callable[[str], bool] | None = None
        self.node = peers.installation.host
        self.forwarder = forwarder
        self._view = _View()

    def _fresh(self, force: bool = False) -> _View:
        now = time.monotonic()
        if force or now - self._view.at >= VIEW_TTL_S:
            workers = self.peers.workers()
            declared = {r for w in workers for r in w.resources}
            holders = self.peers.holders() if declared else {}
            self._view = _View(at=now, declared=declared, workers=workers, holders=holders)
        return self._view

    def owned(self, resources: Sequence[str]) -> list[str]:
        """Those of ``resources`` some worker of the installation owns (cheap: a cached view)."""
        if not resources:
            return []
        declared = self._fresh().declared
        return sorted(r for r in resources if r in declared)

    def decide(self, resources: Sequence[str], *, force: bool = False) -> Placed:
        view = self._fresh(force)
        owned = sorted(r for r in resources if r in view.declared)
        if not owned or (self.holds is not None and all(self.holds(r) for r in owned)):
            return Placed("here")
        version = self.forwarder.version if self.forwarder is not None else None
        by_key = {w.key: w for w in view.workers}
        targets: set[str] = set()
        for resource in owned:
            owners = live_owners(view.workers, resource, self.lease_s)
            if not owners:
                return Placed("nobody", resource, _nobody(resource, view.workers))
            runnable = [w for w in owners if version is None or w.version == version]
            if not runnable:
                seen = ", ".join(f"{w.node} runs {w.version}" for w in owners[:3])
                why = f"no worker of this version ({version}) owns {resource} ({seen}): start one there"
                return Placed("nobody", resource, why)
            holder, left = view.holders.get(resource, ("", -1.0))
            held = by_key.get(holder) if left > 0 else None
            if held is not None and version is not None and held.version != version:
                why = (f"{resource} is held by {held.node}'s worker of another version ({held.version}): "
                       f"calls of this one ({version}) run once a worker of it holds {resource}")  # fmt: skip
                return Placed("nobody", resource, why)
            targets.add(held.node if held is not None else "")
        if len(owned) > 1 and len(targets) > 1:
            nodes = ", ".join(sorted(t or "?" for t in targets))
            claims = ", ".join(owned)
            why = f"the call claims {claims}, held on different nodes ({nodes}): no one worker runs it"
            return Placed("nobody", owned[0], why)
        if (
            self.peers.db.dialect == "sqlite"
        ):  # each home keeps its own DBOS log on SQLite: no queue is shared
            homes = {w.home for w in view.workers if owned[0] in w.resources and w.live(self.lease_s)}
            if homes - {self.home}:
                why = (f"{owned[0]} is owned by a worker of another home, and homes share work only on "
                       "PostgreSQL ([store] database_url): run this from that home")  # fmt: skip
                return Placed("nobody", owned[0], why)
        return Placed("forward", owned[0])

    def missing(self, resources: Sequence[str]) -> list[str]:
        """Owned resources among ``resources`` this executor does not hold now (a forwarded call that
        arrives here must find them all held, or it does not run)."""
        if self.holds is None:
            return []
        return [r for r in self.owned(resources) if not self.holds(r)]

    async def where(self, resources: Sequence[str], wait_s: float = 0.0) -> Placed:
        """``decide``, waiting up to ``wait_s`` for a worker to own what nobody owns."""
        found = await asyncio.to_thread(self.decide, resources)
        deadline = time.monotonic() + wait_s
        while found.verdict == "nobody" and time.monotonic() < deadline:
            await asyncio.sleep(WAIT_POLL_S)
            found = await asyncio.to_thread(self.decide, resources, force=True)
        if found.verdict == "nobody" and wait_s > 0:
            found = Placed("nobody", found.resource, f"{found.message} (waited {wait_s:g} s)")
        return found


def _nobody(resource: str, workers: list[WorkerRecord]) -> str:
    last = [w for w in workers if resource in w.resources]
    hint = (
        f"start `tether worker --resources {resource}` on the host that drives it, or pass "
        "--wait-owner SECONDS to wait for one"
    )
    if not last:
        return f"no worker owns {resource}: {hint}"
    w = max(last, key=lambda r: r.beat_at)
    how = {LOST: "was lost", ALIVE: "went silent"}.get(w.status, "stopped")
    return f"no worker owns {resource} now ({w.node}'s worker {how} {w.silent_s:.0f} s ago): {hint}"
