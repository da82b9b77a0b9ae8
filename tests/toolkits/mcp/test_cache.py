"""The tool list a server gave, as kept in the home: a tool whose name breaks the MCP rule is kept
only as a reason it is left out, its name in a form a terminal cannot act on."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.toolkits.mcp import cache, specs
from tether.toolkits.mcp.servers import load_servers

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}
BAD_NAMES = ["read\x1b[2Jnote", "read note", "a" * 500, "", "读笔记", "evil\u202eexe", "x/y", "a" * 129]


@pytest.mark.parametrize("name", ["read_note", "a" * 128, "x.y-Z_9"])
def test_a_name_within_the_rule_is_kept_as_it_is(name: str) -> None:
    entry = cache.tool_entry(name, None, "Read one note.", SCHEMA, {})
    assert entry["name"] == name and "problem" not in entry and entry["inputSchema"] == SCHEMA


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_outside_the_rule_is_left_out_and_said_so(name: str) -> None:
    entry = cache.tool_entry(name, "A title", "What it does", SCHEMA, {"readOnlyHint": True})
    assert "not a valid MCP tool name" in entry["problem"]
    assert entry["inputSchema"] is None and entry["title"] == "" and entry["description"] == ""
    assert entry["name"].isprintable() and len(entry["name"]) <= 65


@given(st.text(max_size=300))
def test_every_kept_name_is_printable_and_a_left_out_one_stays_left_out(name: str) -> None:
    entry = cache.tool_entry(name, None, None, SCHEMA, None)
    assert entry["name"].isprintable()
    if "problem" in entry:  # what is kept for it never passes the rule, so it can never be imported
        assert cache.tool_entry(entry["name"], None, None, SCHEMA, None)["name"] == entry["name"]
        assert "problem" in cache.tool_entry(entry["name"], None, None, SCHEMA, None)


def test_a_left_out_name_takes_no_task_id_from_a_tool_within_the_rule(home: Path) -> None:
    """``read note`` would map to the task id of ``read_note``: it is left out alone, and says why."""
    (home / "settings.toml").write_text(
        '[[mcp.servers]]\nname = "notes"\ncommand = "notes"\ntools = ["*"]\n', encoding="utf-8"
    )
    server = load_servers(home)["notes"]
    tools = tuple(cache.tool_entry(name, None, "", SCHEMA, {}) for name in ("read note", "read_note"))
    listing = cache.Listing(
        server="notes", fingerprint=server.fingerprint(), listed_at=cache.now(), tools=tools
    )
    cache.write(home, listing)
    [plan] = specs.plan(home)
    by_name = {tool.name: tool for tool in plan.tools}
    assert by_name["read_note"].spec is not None
    assert by_name["read note"].spec is None and "not a valid MCP tool name" in by_name["read note"].skipped
    assert specs.locate(home, "mcp.notes.read_note") == (server, "read_note")
