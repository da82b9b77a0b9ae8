"""Execution: the trust boundary and everything that runs a task in its own process.

Owns the ``Executor`` (executor.py: execute, confirm, control, retention; its steps in admission.py,
inline.py, launch.py, follow.py and records.py), the file protocol between parent and worker
(protocol.py: signed requests, claims, compare-and-set results), the worker entry point (worker.py, and
frozen.py for frozen apps), process identity, spawning and signalling (process.py, spawner.py), forking
from a warm server (forking.py, used by forkserver.py and the CLI server), resource locks (lock.py), the
``JobManager`` control plane (jobs.py) and the fault points tests use (faults.py).
May import ``tether.tasks``, ``tether.store``, ``tether.runtime``, ``tether.config``, ``tether.events`` and
``tether.errors``; nothing above.
"""
