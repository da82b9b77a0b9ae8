"""Interfaces: how people and programs reach tether (the CLI now; the web page and MCP server later).

Every interface reaches tasks and jobs only through the executor, with its caller's identity. May import
every layer below; nothing imports an interface.
"""
