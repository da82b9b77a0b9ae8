"""The ``tether`` command line, composed: each command module adds its commands, this one puts the
groups in place and runs the app. What the commands share lives in ``base.py``.

Every command takes ``--json`` and then prints exactly one JSON document on stdout — also for an
error and for Ctrl-C. Nothing ends in a traceback: a bad registry, settings file or argument, a damaged,
busy or read-only store, a full disk, text that is not UTF-8 and input nested absurdly deep each get one
clear line (``{"error": {"code", "message"}}`` under ``--json``); an unexpected failure says where its
traceback was written. SIGTERM and SIGHUP end a command exactly like Ctrl-C (a job it follows is
stopped first).

Exit codes of ``tether task run``: 0 completed or running, 1 failed or stopped, 2 rejected or not
found; other commands exit 0 on success, 2 on a usage error (unknown job, a live job of another home on the
same database, bad option) and 130 when interrupted.
"""

from __future__ import annotations

import sys

from tether.interfaces import (
    agents_cli,
    artifacts_cli,
    cluster_cli,
    flow_cli,
    home_cli,
    initiative_cli,
    job_cli,
    mcp_cli,
    memory_cli,
    notify_cli,
    task_cli,
    threads_cli,
    web_cli,
)
from tether.interfaces.base import app

# Top-level commands were added by importing their modules; the groups are put in place here, in the
# order `tether --help` lists them.
app.add_typer(task_cli.task_app, name="task")
app.add_typer(job_cli.job_app, name="job")
app.add_typer(home_cli.server_app, name="server")
app.add_typer(threads_cli.threads_app, name="threads")
app.add_typer(agents_cli.agents_app, name="agents")
app.add_typer(memory_cli.memory_app, name="memory")
app.add_typer(initiative_cli.initiative_app, name="initiative")
app.add_typer(initiative_cli.schedule_app, name="schedule")
app.add_typer(notify_cli.notify_app, name="notify")
app.add_typer(home_cli.auth_app, name="auth")
app.add_typer(flow_cli.flow_app, name="flow")
app.add_typer(artifacts_cli.artifacts_app, name="artifacts")
app.add_typer(mcp_cli.mcp_app, name="mcp")
app.add_typer(cluster_cli.cluster_app, name="cluster")

__all__ = ["app", "main", "web_cli"]


def main(argv: list[str] | None = None) -> None:
    """The console entry point: every way a command can end leaves one line, or one JSON document."""
    from tether.interfaces import guard

    code = guard.run(app, sys.argv[1:] if argv is None else argv)
    guard.settle(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
