"""Interfaces: how people and programs reach tether (CLI now; web page and MCP server later).

May import every layer below; nothing imports an interface.
"""
