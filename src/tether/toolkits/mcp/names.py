"""From what a server says about a tool to what tether makes of it: its task id, whether the person's
allowlist takes it, and its danger.

Task ids: ``mcp.<server>.<tool>``, the tool's name made a task-id segment predictably: camelCase words
split with ``_`` (``readFile`` → ``read_file``), lowercase, every other character ``_``, runs of ``_``
folded, a leading digit prefixed with ``t_``, cut at 40 characters. Two tools of one server that come
out the same are both left out, and said so: neither may be called by the other's name.

A name outside the MCP rule (1 to 128 of ``A-Z a-z 0-9 _ . -``) is left out, and said so: it may hold
control characters or a right-to-left override that a terminal acts on when it is printed, so only
``shown(name)`` is ever kept or printed, which never passes the rule itself. What a server says in
words (a tool's title and description, a parameter's) has no rule to break, so it is kept, but
``plain``: what a terminal or the model would take for something else is dropped from it.

Danger: the server's annotations are hints, never permissions. A tool is ``caution`` unless the
person's ``danger`` setting says otherwise; ``destructiveHint: true`` makes it ``destructive``, and no
setting lowers that (a setting may raise any tool); ``readOnlyHint: true`` makes it ``safe`` only when
the person set ``trust_read_only`` for that server (and the server does not also call it destructive).
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from tether.tasks.spec import Danger

PREFIX = "mcp"
MAX_SEGMENT = 40  # with a server's 16: mcp__<server>__<tool> fits a provider's 64 characters
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_OTHER = re.compile(r"[^a-z0-9_]+")
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # the MCP specification's rule for a tool's name
INVALID_NAME = "its name is not a valid MCP tool name (1 to 128 of A-Z a-z 0-9 _ . -)"
SHOWN_CHARS = 64  # of a name outside the rule, when it is printed


def valid(tool_name: str) -> bool:
    return TOOL_NAME.fullmatch(tool_name) is not None


def shown(tool_name: str) -> str:
    """A name outside the rule as it may be printed: each character that is not printable escaped
    (``\\x9b``, ``\\u202e``), cut at ``SHOWN_CHARS``. It never passes the rule (it keeps a character
    the rule refuses, or ends with "…"), and showing it again changes nothing."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in tool_name)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def plain(text: str) -> str:
    """Words a server wrote (a title, a description) as the model and a terminal get them: the
    characters ``shown`` keeps in a name (``str.isprintable``), lines, tabs and spaces of any width.
    The rest is dropped, not escaped (it is prose, not an identifier): C0 and C1 controls (an escape
    sequence, a bell, the 8-bit CSI), the bidirectional overrides and isolates that reorder what a
    person reads, and invisible format characters (tag characters may spell an instruction to the
    model that nobody sees). A carriage return becomes a newline: it would hide the line before it.
    Making plain words plain again changes nothing."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(c for c in lines if c.isprintable() or c in "\n\t" or unicodedata.category(c) == "Zs")


def segment(tool_name: str) -> str:
    """A tool's name as one segment of a task id (``readFile`` → ``read_file``; ``2fa`` → ``t_2fa``)."""
    words = _CAMEL.sub("_", tool_name).lower()
    cleaned = re.sub(r"_+", "_", _OTHER.sub("_", words)).strip("_") or "tool"
    if not cleaned[0].isalpha():
        cleaned = "t_" + cleaned
    return cleaned[:MAX_SEGMENT].rstrip("_")


def task_id(server: str, tool_name: str) -> str:
    return f"{PREFIX}.{server}.{segment(tool_name)}"


def matches(name: str, patterns: Iterable[str]) -> str | None:
    """The first pattern (a name or a glob, case-sensitive) that takes the tool ``name``, else None.
    A pattern may also name the tool by its task-id segment (``read_file`` for ``readFile``)."""
    mapped = segment(name)
    for pattern in patterns:
        if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(mapped, pattern):
            return pattern
    return None


def hint(annotations: Mapping[str, Any] | None, key: str) -> bool:
    """One boolean annotation (``destructiveHint``, ``readOnlyHint``); only a real ``true`` counts."""
    return isinstance(annotations, Mapping) and annotations.get(key) is True


def danger_of(
    name: str,
    annotations: Mapping[str, Any] | None,
    overrides: Mapping[str, str],
    *,
    trust_read_only: bool,
) -> tuple[Danger, str]:
    """The danger of one imported tool and why, in a few words (shown by ``tether mcp tools``)."""
    destructive = hint(annotations, "destructiveHint")
    chosen = matches(name, overrides)
    if chosen is not None:
        wanted = Danger(overrides[chosen])
        if destructive and wanted is not Danger.DESTRUCTIVE:
            return (
                Danger.DESTRUCTIVE,
                f"the server marks it destructive (danger {chosen!r} cannot lower that)",
            )
        return wanted, f"settings: danger {chosen!r}"
    if destructive:
        return Danger.DESTRUCTIVE, "the server marks it destructive"
    if hint(annotations, "readOnlyHint") and trust_read_only:
        return Danger.SAFE, "read-only, and trust_read_only is set"
    return Danger.CAUTION, "the default for an imported tool"
