"""Which environment variables a process that tether starts may inherit: an allowlist, never a blocklist.

A process keeps the environment it was started with in ``/proc/PID/environ`` for its whole life, and a
fork inherits that block whatever ``os.environ`` says afterwards. So every long-lived process tether
starts (a worker, the fork server, the CLI server) is started with an allowlisted environment, never
with the environment of the command that happened to start it — which may hold a key.

Only the standard library here: the thin ``tether`` client imports this module to start its server.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

# What a worker inherits from its starter: the basics a program needs to run, find its files, speak
# the person's locale and reach their screen (desktop automation) — and nothing else. Keys, tokens and
# the session bus (which leads to the OS keyring) stay behind. A registry names what its own tasks
# need (``Registry(env=...)``), a home adds more with ``[execution].worker_env``.
WORKER_ENV_ALLOWLIST = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "TMPDIR", "TEMP", "TMP",
        "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "LC_COLLATE",
        "LC_MONETARY",
        "PYTHONPATH", "PYTHONHOME", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED", "PYTHONSAFEPATH", "VIRTUAL_ENV",
        "TETHER_HOME",
        "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR", "XDG_SESSION_TYPE",
        "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "APPDATA", "LOCALAPPDATA",
        "USERPROFILE", "PROGRAMDATA", "PROGRAMFILES", "NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE",
    }
)  # fmt: skip

# The CLI server preloads the registry named here; every command it forks gets its client's own
# environment with the request, so the server itself needs nothing more.
SERVER_ENV_EXTRA = frozenset({"TETHER_REGISTRY"})


def worker_env(extra: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a worker gets: the allowlist plus the ``extra`` names, where they are set."""
    source = os.environ if environ is None else environ
    allowed = WORKER_ENV_ALLOWLIST | set(extra)
    return {name: value for name, value in source.items() if name in allowed}


def server_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the CLI server starts with (and so every process it forks carries in
    ``/proc/PID/environ``): the worker allowlist and the registry's name."""
    return worker_env(SERVER_ENV_EXTRA, environ)
