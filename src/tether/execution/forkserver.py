"""A pre-started process that forks fresh workers (POSIX).

Starting an interpreter and importing pydantic and a registry costs far more than the work of a short
task. The fork server pays that once: it preloads the worker module and the registry, then forks one
child per execution. Every task still gets a fresh process of its own, in its own session and process
group, with stdio on its ``worker.log``; handlers are imported only in the child, except the modules a
registry names in ``preload``, which the server imports itself in its idle pauses once it is ready (see
``_warm``): children forked afterwards start with them loaded.

Protocol on stdin/stdout, one JSON document per line each way (so any path, newlines included, fits
in one line): ``{"id": n, "spawn": dir[, "keys": {variable: secret}]}`` → ``{"id": n, "pid": pid}`` or
``{"id": n, "error": why}``.
The id is echoed, so an answer is never taken for another request's. The server reaps its children
and records each exit code in the child's result file; forking.py does both, for the CLI server too.
It exits when its stdin closes (its parent is gone); running workers go on and watch their starter
themselves.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tether.execution.forking import Children  # and with it the worker module, preloaded
from tether.tasks.spec import Registry

READY = "ready"


# No request for this long: import the next module the registry asks to preload. An import holds up a
# spawn that arrives meanwhile (WeasyPrint takes 0.7 s), so warming waits for a real pause.
IDLE_S = 0.5


def _warm(name: str) -> bool:
    """Import one preload module (a failure is logged, never fatal: the worker imports it itself).
    False when warming must stop: the import started a thread (forking a process with threads is
    unsafe) — the server goes on without preloading more. A signal handler it installed is undone."""
    handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    started = time.monotonic()
    try:
        importlib.import_module(name)
    except Exception as exc:  # a broken or missing optional library must not stop the server
        why = f"{type(exc).__name__}: {exc}"
        print(f"forkserver: preloading {name} failed: {why}", file=sys.stderr, flush=True)
    else:
        took = time.monotonic() - started
        print(f"forkserver: preloaded {name} in {took:.2f} s", file=sys.stderr, flush=True)
    for sig, handler in handlers.items():
        if signal.getsignal(sig) is not handler and handler is not None:
            signal.signal(sig, handler)  # workers forked later get the server's own handlers
    gc.collect()
    gc.freeze()
    if threading.active_count() > 1:
        print(f"forkserver: {name} started a thread; preloading stops here", file=sys.stderr, flush=True)
        return False
    return True


_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


def serve(registry_ref: str) -> int:
    registry = Registry.load(registry_ref)  # preload: the registry module, pydantic, the params models
    warm = list(registry.preload)  # heavier modules, one at a time while idle, after READY
    # Everything loaded so far is never collected: children then do not copy the pages that a garbage
    # collection would otherwise touch (fork stays cheap and memory stays shared).
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the parent's stdin closing ends the server
    children = Children()
    children.catch_sigchld()
    stdin = sys.stdin.buffer
    out = sys.stdout
    out.write(READY + "\n")
    out.flush()
    parent = os.getppid()
    quiet_since = time.monotonic()  # the last spawn request: warming waits for a quiet moment
    while True:
        if os.getppid() != parent:
            # The executor died, and something it forked still holds the write end of our stdin (so
            # no EOF comes): nobody will ask for a worker again. Its workers see it too, and stop.
            children.reap()
            if not children.workers:
                return 0
        try:
            readable, _, _ = select.select([stdin, children.wake_r], [], [], IDLE_S if warm else 1.0)
        except InterruptedError:
            readable = [children.wake_r]
        if children.wake_r in readable:
            children.drain()
        children.reap()
        if stdin not in readable:
            if warm and time.monotonic() - quiet_since >= IDLE_S and not _warm(warm.pop(0)):
                warm.clear()
            continue
        quiet_since = time.monotonic()
        line = stdin.readline()
        if not line:
            return 0
        try:
            request = json.loads(line)
            ident, exec_dir = request["id"], Path(request["spawn"])
            keys = request.get("keys") or {}  # the secrets its task names, for this worker alone
            if not isinstance(keys, dict):
                raise TypeError("keys")
        except (ValueError, KeyError, TypeError, AttributeError):
            _answer(out, None, error=f"unknown request of {len(line)} bytes")  # it may hold secrets
            continue
        try:
            pid = children.fork_worker(exec_dir, keys=keys)  # fds 0-2 are replaced in the child
        except OSError as exc:
            _answer(out, ident, error=f"fork failed: {exc}")
            continue
        _answer(out, ident, pid=pid)


def _answer(out: Any, ident: object, **answer: object) -> None:
    out.write(json.dumps({"id": ident, **answer}) + "\n")
    out.flush()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tether.execution.forkserver <registry module:attribute>", file=sys.stderr)
        return 2
    return serve(args[0])


if __name__ == "__main__":
    sys.exit(main())
