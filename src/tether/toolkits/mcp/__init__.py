"""The MCP toolkit: tools of other MCP servers, chosen by the person, as tether tasks
(``mcp.<server>.<tool>``) that run through the executor like any other.

Owns: reading ``[[mcp.servers]]`` (``servers``), the tool list each server gave when it was last asked
(``cache``, refreshed only by ``tether mcp tools --refresh``, which runs the ``mcp.refresh`` task), the
mapping of tool names to task ids and of annotations to danger (``names``), the parameter models built
from a server's JSON Schemas (``schema``), the tasks one home imports (``specs``: light, no MCP SDK), and
the calls themselves (``client`` and ``handlers``: the SDK, imported only in the worker of a call or
of ``mcp.refresh``).

May import: ``tether.tasks``, ``tether.config``, ``tether.errors``, ``tether.credentials``; never
execution, agent or interfaces.
"""
