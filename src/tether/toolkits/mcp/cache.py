"""The tool list each server gave when it was last asked: ``<home>/mcp/tools/<server>.json``.

Asking a server means starting it (a command) or reaching it (a URL), so it is never done when a
command starts: ``tether mcp tools --refresh`` runs the ``mcp.refresh`` task, whose worker lists the
server's tools and writes this file (whole, then ``os.replace``\\ d; owner-only). The registry reads it.
A list is kept with the fingerprint of the server's settings (``McpServer.fingerprint``): once the
command, arguments or URL change, the old list is stale and no tool of it is imported until a refresh.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.config import PRIVATE_FILE, private_dir
from tether.toolkits.mcp import names

PROTOCOL = 1
MAX_TOOLS = 500  # a server listing more: the first ones are kept, and the listing says so
MAX_DESCRIPTION = 4000  # characters of a tool's description kept (it is read by the model)
MAX_SCHEMA_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    server: str
    fingerprint: str
    listed_at: float
    server_info: dict[str, Any] = field(default_factory=dict)
    tools: tuple[dict[str, Any], ...] = ()
    dropped: int = 0  # tools past MAX_TOOLS


def folder(home: Path) -> Path:
    return home / "mcp" / "tools"


def path_of(home: Path, server: str) -> Path:
    return folder(home) / f"{server}.json"


def tool_entry(
    name: str, title: str | None, description: str | None, schema: Any, annotations: Any
) -> dict[str, Any]:
    """One tool as kept: what the server said, its description clipped, a schema too large left out
    (the tool is then reported as unusable rather than imported). A name outside the MCP rule keeps
    only its printable form and why it is left out (``names.valid``)."""
    if not names.valid(name):
        return {
            "name": names.shown(name), "title": "", "description": "", "inputSchema": None,
            "annotations": {}, "problem": names.INVALID_NAME,
        }  # fmt: skip
    text = description or ""
    if len(text) > MAX_DESCRIPTION:
        text = text[:MAX_DESCRIPTION] + "…"
    encoded = json.dumps(schema, ensure_ascii=False, default=str)
    oversized = len(encoded.encode()) > MAX_SCHEMA_BYTES
    return {
        "name": name,
        "title": title or "",
        "description": text,
        "inputSchema": None if oversized else schema,
        "annotations": annotations if isinstance(annotations, dict) else {},
        **({"problem": f"its inputSchema is over {MAX_SCHEMA_BYTES} bytes"} if oversized else {}),
    }


def write(home: Path, listing: Listing) -> Path:
    target = path_of(home, listing.server)
    private_dir(target.parent)
    body = {
        "protocol": PROTOCOL,
        "server": listing.server,
        "fingerprint": listing.fingerprint,
        "listed_at": listing.listed_at,
        "server_info": listing.server_info,
        "tools": list(listing.tools),
        "dropped": listing.dropped,
    }
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(body, out, ensure_ascii=False)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return target


def read(home: Path, server: str) -> Listing | str | None:
    """The kept list of ``server``; None when it was never listed; a sentence when the file is damaged."""
    target = path_of(home, server)
    try:
        body = json.loads(target.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return (
            f"its tool list {str(target)!r} cannot be read ({exc}): run `tether mcp tools {server} --refresh`"
        )
    if (
        not isinstance(body, dict)
        or body.get("protocol") != PROTOCOL
        or not isinstance(body.get("tools"), list)
    ):
        refresh = f"tether mcp tools {server} --refresh"
        return f"its tool list {str(target)!r} is not one this tether wrote: run `{refresh}`"
    return Listing(
        server=server,
        fingerprint=str(body.get("fingerprint", "")),
        listed_at=float(body.get("listed_at", 0.0)),
        server_info=body.get("server_info") or {},
        tools=tuple(
            tool for tool in body["tools"] if isinstance(tool, dict) and isinstance(tool.get("name"), str)
        ),
        dropped=int(body.get("dropped", 0)),
    )


def now() -> float:
    return time.time()
