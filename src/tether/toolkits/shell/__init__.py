"""The shell toolkit: allow-listed commands of the person's own choosing, never a shell string.

Owns: loading ``[[shell.commands]]`` and building argv lists from them (``allowlist``), the
``shell.*`` tasks (``specs`` is light; ``handlers`` runs commands, only in workers), and keeping every
process a command starts inside its reach until it ends (``containment``: a cgroup per command, or the
worker as a child subreaper; standard library only).

May import: ``tether.tasks``, ``tether.config``, ``tether.errors``, ``tether.credentials`` and the
workspace toolkit's ``paths`` (a command's ``cwd`` lies inside the workspace); never execution, agent
or interfaces.
"""
