"""The callers tether itself knows, and what a caller's name may be: plain constants, no pydantic, so
a command that only needs a name (``tether --help``) does not load the task model."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")

# The callers tether itself knows; a named client profile is any other valid name.
AGENT, CLI, MCP = "agent", "cli", "mcp"
EVERYONE = frozenset({AGENT, CLI, MCP})
