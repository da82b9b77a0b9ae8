"""``tether workers`` and ``tether cluster id|join|forget``: an installation spread over several hosts.

Every host of a cluster has a home of its own, on one PostgreSQL database, with one installation id
(``tether cluster join``) and a node name of its own (``[cluster] node``, or ``tether worker --name``).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Annotated

import typer

from tether.interfaces.base import JsonFlag, app, fail, guarded, state
from tether.interfaces.render import err, out

cluster_app = typer.Typer(
    help="Join this home to an installation on several hosts, or retire a host.", no_args_is_help=True
)


def _runtime():
    from tether.runtime import Runtime

    return Runtime.open(state.home)


@app.command("workers")
def workers_command(
    everyone: Annotated[
        bool, typer.Option("--all", help="Stopped and lost workers too, not only live ones")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """The installation's workers on every host: node, resources, status, last heartbeat, version."""

    def body() -> int:
        from tether.interfaces.tables import Column, print_table
        from tether.store.workers import ALIVE, WorkerStore

        with _runtime() as rt:
            lease = rt.cluster_settings.lease_s
            found = WorkerStore(rt.db, rt.cluster_settings.lease_s).workers(alive_only=not everyone)
            holders = WorkerStore(rt.db, rt.cluster_settings.lease_s).holders()
        rows = []
        for w in found:
            status = w.status if not (w.status == ALIVE and w.silent_s > lease) else "silent"
            holds = sorted(r for r, (h, left) in holders.items() if h == w.key and left > 0)
            rows.append({**w.to_dict(), "status": status, "holds": holds})
        if as_json:
            print(json.dumps(rows, ensure_ascii=False))
            return 0
        if not rows:
            hint = "" if everyone else " (--all shows stopped and lost ones)"
            out.print(f"no live worker: start one with `tether worker`{hint}", markup=False)
            return 0
        columns = [Column(header="node"), Column(header="executor"), Column(header="status"),
                   Column(header="heartbeat"), Column(header="holds"), Column(header="owns", kind="clip"),
                   Column(header="version", drop=1)]  # fmt: skip
        table = [
            [r["node"], r["executor_id"], r["status"], f"{r['silent_s']:.1f} s ago",
             ", ".join(r["holds"]) or "-", ", ".join(r["resources"]) or "-", r["version"]]
            for r in rows
        ]  # fmt: skip
        print_table(columns, table)
        return 0

    guarded(as_json, body)


@cluster_app.command("id")
def cluster_id(as_json: JsonFlag = False) -> None:
    """Print this home's installation id: give it to `tether cluster join` on the other hosts."""

    def body() -> int:
        from tether.config import resolve_home
        from tether.installation import installation_id

        home = resolve_home(state.home)
        found = installation_id(home)
        print(json.dumps({"installation": found, "home": str(home)}) if as_json else found)
        return 0

    guarded(as_json, body)


@cluster_app.command("join")
def cluster_join(
    installation: Annotated[str, typer.Argument(help="The id `tether cluster id` printed on another host")],
    as_json: JsonFlag = False,
) -> None:
    """Make this home a node of the installation INSTALLATION (before it has run anything of its own)."""

    def body() -> int:
        from tether.config import resolve_home
        from tether.installation import join

        home = resolve_home(state.home)
        before = join(home, installation)
        done = "already a node of" if before == installation else "now a node of"
        clash = _node_taken(home)
        if as_json:
            print(
                json.dumps(
                    {"installation": installation, "home": str(home), "before": before, "clash": clash}
                )
            )
        else:
            out.print(f"{home} is {done} installation {installation}", markup=False)
            if clash:
                err.print(clash, markup=False)
        return 0

    guarded(as_json, body)


def _node_taken(home: Path) -> str | None:
    """A warning when another home of the installation already runs executors under this home's node
    name (the node tells whose jobs are whose: two homes must never share one)."""
    from tether.store.workers import WorkerStore

    try:
        with _runtime() as rt:
            node = rt.installation.host
            others = {
                (w.machine, w.home)
                for w in WorkerStore(rt.db, rt.cluster_settings.lease_s).workers()
                if w.node == node
            }
    except Exception:  # no database yet (settings still to write): nothing to compare with
        return None
    others.discard((socket.gethostname(), str(home)))
    if not others:
        return None
    machine, where = sorted(others)[0]
    return (
        f"warning: node name {node!r} is already used by the home {where} on {machine}: give this home a "
        "name of its own ([cluster] node in its settings.toml) before it runs anything"
    )


@cluster_app.command("forget")
def cluster_forget(
    node: Annotated[str, typer.Argument(help="The node whose stopped or lost workers to remove")],
    as_json: JsonFlag = False,
) -> None:
    """Remove a retired host's workers from the registry (live ones stay: stop them first)."""

    def body() -> int:
        from tether.store.workers import WorkerStore

        with _runtime() as rt:
            gone = WorkerStore(rt.db, rt.cluster_settings.lease_s).forget(node)
            lease = rt.cluster_settings.lease_s
            alive = [
                w
                for w in WorkerStore(rt.db, lease).workers(alive_only=True)
                if w.node == node and w.live(lease)
            ]
        if alive and not gone:
            fail(f"node {node} has {len(alive)} live worker(s): stop them first", as_json=as_json)
        if as_json:
            print(json.dumps({"node": node, "forgotten": gone}))
        else:
            out.print(f"forgot {gone} worker record(s) of node {node}", markup=False)
        return 0

    guarded(as_json, body)
