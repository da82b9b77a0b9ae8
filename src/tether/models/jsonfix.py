"""Lenient JSON for models that answer in prose: code fences, trailing commas, single quotes, text
around the object. The object is located by a bracket scan that respects strings, then parsed strictly,
then with ``json_repair``."""

from __future__ import annotations

import json
import re
from typing import Any

FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def _objects(text: str) -> list[str]:
    """Every top-level ``{...}`` span of ``text``, outermost first, in order."""
    spans: list[str] = []
    depth = 0
    start = -1
    quote: str | None = None
    escaped = False
    for i, ch in enumerate(text):
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            continue
        if ch in "\"'" and depth > 0:
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    if depth > 0 and start >= 0:
        spans.append(text[start:])  # an object cut off at the end: let repair close it
    return spans


def loads_lenient(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text``, repaired if it has to be; None when there is none."""
    candidates: list[str] = [m.group(1) for m in FENCE.finditer(text)]
    candidates.append(text)
    for candidate in candidates:
        for span in _objects(candidate):
            try:
                value = json.loads(span)
            except RecursionError:
                continue  # nested too deeply to be a decision
            except ValueError:
                from json_repair import repair_json

                try:
                    value = json.loads(repair_json(span, skip_json_loads=True))
                except (ValueError, TypeError, RecursionError):
                    continue
            if isinstance(value, dict) and value:
                return value
    return None
