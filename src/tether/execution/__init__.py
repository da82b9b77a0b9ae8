"""Execution: the trust boundary and everything that runs a task in its own process.

Owns the ``Executor`` (executor.py), the file protocol between parent and worker (protocol.py), the
worker entry point (worker.py), process identity, spawning and signalling (process.py, spawner.py,
forkserver.py), resource locks (lock.py) and the ``JobManager`` control plane (jobs.py).
May import ``tether.tasks``, ``tether.store``, ``tether.config`` and ``tether.errors``; nothing above.
"""
