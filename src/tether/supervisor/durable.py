"""DBOS Transact behind one small module: where its log lives, who may launch it, and the client.

- **Where**: DBOS keeps its recovery log in its own database — ``<home>/dbos.sqlite`` (WAL) next to
  tether's store by default, or the ``dbos`` schema of the PostgreSQL database ``[store].database_url``
  names. tether's own tables stay the readable record.
- **Whose**: several homes (installations) may share one PostgreSQL, and with it DBOS's system schema.
  Each is a DBOS application of its own, ``tether-<installation id>``, with its own queue and version
  (``names``): DBOS dequeues, runs and recovers a workflow only in the application that owns it, so one
  home's executors never run, take over or recover another home's runs and turns (whose jobs, files and
  locks they could not reach anyway).
- **Who executes**: only executor processes launch DBOS (``tether worker``, ``tether serve``, or a
  ``tether goal`` / ``flow run`` that finds no executor and becomes one for the duration). Each holds an
  **executor slot** — an OS lock on ``<home>/executors/slot-N.lock`` from before launch to exit — and
  runs under the executor id ``<host>/<installation id>/slot-N``: stable (a restarted executor takes a
  free slot and recovers what a dead holder of any free slot left) and unique among live processes
  (DBOS's launch re-dispatches every pending workflow of its id; two live processes never share one,
  nor two homes, even at the same path on two hosts).
- **Everyone else** talks to DBOS through ``DBOSClient`` (enqueue, cancel, list): short commands never
  launch it, so they never run or steal another process's workflow.

``import dbos`` costs about a second, so it happens here, lazily, only where flows are used.
"""

from __future__ import annotations

import functools
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tether.errors import ConfigError
from tether.execution.lock import try_hold
from tether.installation import installation_id

if TYPE_CHECKING:
    from dbos import DBOSClient

    from tether.runtime import Runtime

APP_NAME = "tether"  # an installation's application is tether-<installation id> (``names``)
# Pinned and bumped deliberately: DBOS recovers only workflows of the running version, so a change to
# the engine's workflow or step sequence that would replay differently must bump this.
# 4: a wave of inline calls runs inside the decision step (``advance``); 3: calls forwarded to a
# resource's holder (a queue per resource); 2: agent attempts are child workflows
APP_VERSION = "tether-flows-4"
QUEUE = "tether-runs"  # an installation's queue is tether-runs-<installation id>
WORKFLOW = "tether.run_segment"
TURN_WORKFLOW = "tether.turn"
DELEGATION_WORKFLOW = "tether.delegation"  # a delegated turn, a child of the delegator's turn
SCHEDULE_WORKFLOW = "tether.schedule_fire"  # one tick of a schedule (``schedules.py``)
REMOTE_CALL_WORKFLOW = "tether.remote_call"  # a call forwarded to the holder of its resource (``cluster.py``)
POLL_S = 0.05
SLOTS = 64
SLOTS_DIR = "executors"
DBOS_FILE = "dbos.sqlite"


@dataclass(frozen=True, slots=True, kw_only=True)
class Names:
    """What DBOS knows one installation by. Queue and version names are unique across the applications
    of a system database, so they carry the installation too."""

    app: str
    queue: str
    version: str


def names(installation: str) -> Names:
    return Names(
        app=f"{APP_NAME}-{installation}",
        queue=f"{QUEUE}-{installation}",
        version=f"{APP_VERSION}+{installation}",
    )


def system_url(runtime: Runtime) -> str:
    """The URL of DBOS's system database for this home."""
    url = runtime.db.url
    if url.startswith("sqlite"):
        return f"sqlite:///{runtime.home / DBOS_FILE}"
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _serializer() -> Any:
    from dbos._serialization import DBOSPortableJSONSerializer

    return DBOSPortableJSONSerializer()


_PREPARED: set[tuple[str, str, int]] = set()


def prepare(url: str, own: Names, concurrency: int) -> None:
    """Create or migrate DBOS's schema, in WAL mode on SQLite, and register the installation's queue with
    fast polling (so the first executor to launch listens to it at once), each executor running at most
    ``concurrency`` of its workflows at once (``[cluster] concurrency``). Cheap after the first time."""
    if (url, own.app, concurrency) in _PREPARED:
        return
    from dbos import DBOS

    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        fresh = not path.exists()
        if fresh:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
    DBOS.migrate(url)
    client = _client(url, own)
    try:
        queue = client.retrieve_queue(own.queue)
        if queue is None or queue.worker_concurrency != concurrency:  # a home set another value
            client.register_queue(own.queue, polling_interval_sec=POLL_S, worker_concurrency=concurrency)
    finally:
        client.destroy()
    _PREPARED.add((url, own.app, concurrency))


def resource_queue(own: Names, resource: str) -> str:
    """The queue of an owned resource: only its holder dequeues it, one workflow at a time across the
    installation (PostgreSQL enforces the global limit; on SQLite the node's flock does)."""
    return f"{own.queue}@{resource}"


_PREPARED_QUEUES: set[tuple[str, str]] = set()


def prepare_resources(url: str, own: Names, resources: tuple[str, ...]) -> None:
    """Register the queues of ``resources`` before an executor that owns them launches (DBOS picks up a
    queue registered later only at its next look, a second on)."""
    wanted = [
        resource_queue(own, r) for r in resources if (url, resource_queue(own, r)) not in _PREPARED_QUEUES
    ]
    if not wanted:
        return
    client = _client(url, own)
    try:
        for name in wanted:
            if client.retrieve_queue(name) is None:
                client.register_queue(name, global_concurrency=1, polling_interval_sec=POLL_S)
            _PREPARED_QUEUES.add((url, name))
    finally:
        client.destroy()


CLIENT_POOL = 5  # a client's connections (DBOS's default)
EXECUTOR_POOL = 20  # a launched executor's (DBOS's default)


def _engine_options(pool: int, application: str) -> dict[str, Any]:
    """DBOS's engine on PostgreSQL, as tether's store connects: keepalives, and a ping only for a
    connection that sat idle (``ping_when_idle``) rather than a round trip before every transaction."""
    from tether.store.database import postgres_connect_args

    return {
        "connect_args": {**postgres_connect_args(10), "application_name": application},
        "pool_size": pool, "max_overflow": 0, "pool_timeout": 30, "pool_pre_ping": False,
    }  # fmt: skip


def _client(url: str, own: Names) -> DBOSClient:
    from dbos import DBOSClient

    if url.startswith("sqlite"):
        return DBOSClient(system_database_url=url, serializer=_serializer(), application_name=own.app)
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    from tether.store.database import ping_when_idle

    engine = create_engine(
        make_url(url).set(drivername="postgresql+psycopg"),
        **_engine_options(CLIENT_POOL, "dbos_transact_client"),
    )
    ping_when_idle(engine)
    made = DBOSClient(system_database_engine=engine, serializer=_serializer(), application_name=own.app)
    destroy = made.destroy

    def destroy_with_engine() -> None:  # DBOS leaves an engine it was given to its owner
        try:
            destroy()
        finally:
            engine.dispose()

    made.destroy = destroy_with_engine  # type: ignore[method-assign]
    return made


class Client:
    """A DBOS client acting for one installation (``names``): what it enqueues, lists and cancels is that
    application's. Everything else is ``DBOSClient``'s."""

    def __init__(self, raw: DBOSClient, own: Names) -> None:
        self.raw = raw
        self.names = own

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def open_client(runtime: Runtime) -> Client:
    """A DBOS client of its own for ``runtime``'s home (the schema prepared first): ``destroy`` it when
    done. ``client`` shares one instead."""
    url, own = system_url(runtime), names(runtime.installation.id)
    prepare(url, own, runtime.cluster_settings.concurrency)
    return Client(_client(url, own), own)


_SHARED_LOCK = threading.Lock()


def shared_client(runtime: Runtime) -> Client:
    """The DBOS client of ``runtime``'s home in this process, opened once and kept with its connections
    until the runtime's database closes: a run started, a segment looked at or a call forwarded costs a
    query, not a client and a new connection (on PostgreSQL a server process of its own). Thread-safe;
    a forked child opens its own rather than share its parent's connections."""
    key = os.getpid()
    with _SHARED_LOCK:
        kept = runtime.db.attached.get(SHARED_CLIENT)
        if kept is not None and kept[0] == key:
            return kept[1]
        made = open_client(runtime)
        runtime.db.attached[SHARED_CLIENT] = (key, made)
    runtime.db.on_close(functools.partial(_close_shared, runtime.db, key))
    return made


SHARED_CLIENT = "dbos-client"


def _close_shared(db: Any, pid: int) -> None:
    with _SHARED_LOCK:
        kept = db.attached.get(SHARED_CLIENT)
        if kept is None or kept[0] != pid or pid != os.getpid():
            return
        del db.attached[SHARED_CLIENT]
    kept[1].raw.destroy()


@contextmanager
def client(runtime: Runtime) -> Iterator[Client]:
    """``shared_client`` for a ``with`` block (kept open after it)."""
    yield shared_client(runtime)


def segment_id(run_id: str, segment: int) -> str:
    """The workflow id of one segment of a run: enqueuing it twice enqueues it once."""
    return f"{run_id}.{segment}"


def enqueue_segment(runtime: Runtime, run_id: str, segment: int, delay_s: float = 0.0) -> None:
    """Enqueue segment ``segment`` of ``run_id`` (a repeat with the same number is a no-op)."""
    with client(runtime) as c:
        options: dict[str, Any] = {
            "workflow_name": WORKFLOW,
            "queue_name": c.names.queue,
            "workflow_id": segment_id(run_id, segment),
            "app_version": c.names.version,
        }
        if delay_s > 0:
            options["delay_seconds"] = delay_s
        c.enqueue(options, run_id, segment)


class TurnBusy(ConfigError):
    """The thread has a turn under way (enqueued or running) already."""


def enqueue_turn(c: Any, workflow_id: str, request: dict[str, Any]) -> None:
    """Hand a person's conversation turn to the home's executors (``turns.run_turn``) through ``c``, a
    ``client`` of the home. One per thread at a time: the queue deduplicates on the thread, so of two
    racing requests one is refused (``TurnBusy``), never queued behind the other."""
    from dbos._error import DBOSQueueDeduplicatedError

    thread_id = str(request.get("thread_id", ""))
    options = {
        "workflow_name": TURN_WORKFLOW,
        "queue_name": c.names.queue,
        "workflow_id": workflow_id,
        "app_version": c.names.version,
        "deduplication_id": f"thread:{thread_id}",
    }
    try:
        c.enqueue(options, request)
    except DBOSQueueDeduplicatedError as exc:
        raise TurnBusy(f"thread {thread_id!r} is in a turn already: wait for it to end") from exc


def outcome(c: Any, workflow_id: str) -> tuple[str | None, Any]:
    """A workflow's status and, once it has one, its output (or its error)."""
    found = c.list_workflows(workflow_ids=[workflow_id])
    if not found:
        return None, None
    status = found[0]
    return status.status, status.output if status.error is None else status.error


def continue_run(runtime: Runtime, run_id: str, segment: int) -> None:
    """Hand a run that must go on to its next segment: the segment number moves once (compare-and-set)
    and the enqueue is deduplicated by the segment's workflow id, so racing callers start it once."""
    following = runtime.runs.next_segment(run_id, expect=segment) or segment + 1
    enqueue_segment(runtime, run_id, following)


def cancel_segment(runtime: Runtime, run_id: str, segment: int) -> None:
    with client(runtime) as c:
        found = c.list_workflows(workflow_ids=[segment_id(run_id, segment)])
        if found and found[0].status in ("ENQUEUED", "PENDING", "DELAYED"):
            # with its children: an agent's attempt is a child workflow whose turn must stop too
            c.cancel_workflow(segment_id(run_id, segment), cancel_children=True)


def cancel_workflows(runtime: Runtime, workflow_ids: list[str]) -> None:
    """Cancel those of ``workflow_ids`` that have not ended (with their children)."""
    if not workflow_ids:
        return
    with client(runtime) as c:
        for status in c.list_workflows(workflow_ids=workflow_ids, load_input=False, load_output=False):
            if status.status in ("ENQUEUED", "PENDING", "DELAYED"):
                c.cancel_workflow(status.workflow_id, cancel_children=True)


# A running run whose current segment is in one of these states has nothing to drive it: the segment
# ended (a pause that was answered meanwhile, or a crash between an answer and its enqueue), failed, was
# cancelled, or was never enqueued (None).
NO_LIVE_SEGMENT = (None, "SUCCESS", "CANCELLED", "ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")


def segment_status(runtime: Runtime, run_id: str, segment: int) -> str | None:
    with client(runtime) as c:
        found = c.list_workflows(workflow_ids=[segment_id(run_id, segment)])
    return found[0].status if found else None


def prune(runtime: Runtime, *, older_than_days: float | None = None) -> int:
    """Retention for this home's runs, by ``[store].keep_days`` (0 keeps everything): runs that ended
    before the cutoff leave tether's tables and their workflow segments leave DBOS's log, as do the
    workflows of calls forwarded to a resource's holder that ended before it. The runs pruned (another
    home's are its own to prune)."""
    from datetime import UTC, datetime, timedelta

    days = runtime.store_settings.keep_days if older_than_days is None else older_than_days
    if not days:
        return 0
    cutoff = (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="microseconds")
    gone = runtime.runs.delete_ended(cutoff)
    with client(runtime) as c:
        ids = [segment_id(run_id, n) for run_id, last in gone for n in range(last + 1)]
        calls = c.list_workflows(
            name=REMOTE_CALL_WORKFLOW, status=ENDED, completed_before=cutoff, limit=PRUNE_CALLS,
            load_input=False, load_output=False,
        )  # fmt: skip
        ids += [w.workflow_id for w in calls]
        for chunk in range(0, len(ids), 500):
            c.delete_workflows(ids[chunk : chunk + 500])
    return len(gone)


ENDED = ["SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"]
PRUNE_CALLS = 10_000  # forwarded calls' workflows deleted by one pass at most


# -- executor slots ------------------------------------------------------------------------------


def executor_id(home: Path, slot: int, node: str = "") -> str:
    """The DBOS executor id of a slot of ``node`` (the home's ``[cluster] node``; the host's name by
    default): the installation's id, not the home's path, tells two homes apart (``~/.tether`` is the
    same path on every host), and the node tells the homes of one installation apart."""
    return f"{node or socket.gethostname()}/{installation_id(home)}/slot-{slot}"


def _slot_path(home: Path, slot: int) -> Path:
    return home / SLOTS_DIR / f"slot-{slot}.lock"


class Slot:
    """An executor slot held by this process (released on ``close`` or at exit)."""

    def __init__(self, home: Path, number: int, handle: IO[bytes], node: str = "") -> None:
        self.home = home
        self.number = number
        self.node = node
        self.executor_id = executor_id(home, number, node)
        self._handle: IO[bytes] | None = handle

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def take_slot(home: Path, node: str = "") -> Slot:
    """The first free executor slot of ``home`` (whose node is ``node``)."""
    for number in range(SLOTS):
        handle = try_hold(_slot_path(home, number))
        if handle is not None:
            return Slot(home, number, handle, node)
    from tether.errors import ConfigError

    raise ConfigError(f"all {SLOTS} executor slots of {home} are taken: stop an executor first")


def _slots(home: Path) -> list[tuple[int, Path]]:
    folder = home / SLOTS_DIR
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("slot-*.lock")):
        number = path.stem.removeprefix("slot-")
        if number.isdigit():
            found.append((int(number), path))
    return found


def holder_alive(home: Path, executor: str | None, node: str = "") -> bool | None:
    """Whether the executor id ``executor`` (``<node>/<installation>/slot-N``) is held by a live process
    of this home (node ``node``); None when that cannot be told from here (another node's or home's)."""
    if not executor:
        return None
    prefix, _, slot = executor.rpartition("/slot-")
    if not slot.isdigit() or executor != executor_id(home, int(slot), node) or prefix == "":
        return None
    return int(slot) in live_executors(home)


def segment_holder(runtime: Runtime, run_id: str, segment: int) -> tuple[str | None, str | None]:
    """A segment's DBOS status and the executor id it is pending under (None when not pending)."""
    with client(runtime) as c:
        found = c.list_workflows(
            workflow_ids=[segment_id(run_id, segment)], load_input=False, load_output=False
        )
    if not found:
        return None, None
    return found[0].status, found[0].executor_id if found[0].status == "PENDING" else None


def live_executors(home: Path) -> list[int]:
    """The slots a live process holds (an executor runs there)."""
    live = []
    for number, path in _slots(home):
        handle = try_hold(path)
        if handle is None:
            live.append(number)
        else:
            handle.close()
    return live


def recover_free_slots(home: Path, mine: Slot) -> int:
    """Hand back to the queue what dead executors of this home left running: for every slot no live
    process holds, take it for a moment and re-enqueue its pending workflows (the launched DBOS
    recovers ``mine`` itself). The number of workflows re-enqueued."""
    from dbos._recovery import recover_pending_workflows

    count = 0
    for number, path in _slots(home):
        if number == mine.number:
            continue
        handle = try_hold(path)
        if handle is None:
            continue  # a live executor holds it: its work is its own
        try:
            count += len(recover_pending_workflows(instance(), [executor_id(home, number, mine.node)]))
        finally:
            handle.close()
    return count


def instance() -> Any:
    """The launched DBOS of this process."""
    from dbos import _dbos

    return _dbos._get_dbos_instance()


def config(runtime: Runtime, slot: Slot) -> dict[str, Any]:
    own = names(runtime.installation.id)
    made: dict[str, Any] = {
        "name": own.app,  # DBOS dequeues and recovers only this application's workflows
        "system_database_url": system_url(runtime),
        "executor_id": slot.executor_id,
        "application_version": own.version,
        "serializer": _serializer(),
        "notification_listener_polling_interval_sec": POLL_S,
        "log_level": "WARNING",
        "run_migrations": False,
    }
    if not made["system_database_url"].startswith("sqlite"):
        made["db_engine_kwargs"] = _engine_options(EXECUTOR_POOL, "dbos_transact")
    return made


def ping_idle_connections() -> None:
    """After launch: the launched DBOS's pooled connections pinged only when idle (``_engine_options``)."""
    from tether.store.database import ping_when_idle

    sys_db = instance()._sys_db
    if sys_db.engine.dialect.name == "postgresql":
        ping_when_idle(sys_db.engine)
