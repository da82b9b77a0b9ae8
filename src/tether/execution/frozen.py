"""The entry dispatch of a frozen (PyInstaller) app, which has no ``python -m`` to start a module with.

A frozen app re-enters its own executable with a flag (``process.worker_command`` and
``process.forkserver_command`` build those command lines), and its entry point calls
``dispatch_frozen()`` first thing: the call becomes the worker or the fork server that was asked for, or
returns at once when neither was. It sits above both so that neither needs to know the other: the fork
server runs workers, and a worker never starts a fork server.
"""

from __future__ import annotations

import sys

from tether.execution import process


def dispatch_frozen(argv: list[str] | None = None) -> None:
    """Call first thing in a frozen app's entry point: runs a worker or fork server when asked to."""
    args = sys.argv if argv is None else argv
    if len(args) >= 3 and args[1] == process.WORKER_FLAG:
        from tether.execution import worker

        sys.exit(worker.main(args[2:]))
    if len(args) >= 3 and args[1] == process.FORKSERVER_FLAG:
        from tether.execution import forkserver

        sys.exit(forkserver.main(args[2:]))
