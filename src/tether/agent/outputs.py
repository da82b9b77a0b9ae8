"""Which files a turn generates: the formats the person ticked win; a model that chose to generate files
without naming a format gets one light follow-up decision; nothing is generated otherwise.

Files are made by one task, ``documents.generate``. A person ticks formats on the page or with
``tether run --format pptx``; those travel with the turn (and with its question, when it waits for a
confirmation) and replace whatever formats the model wrote. When the model calls the task with no
format and the person ticked none, the model is asked once, with no tools, which formats (if any) the
person's request calls for; an answer naming none means no file is generated, and the model is told so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from tether.models.jsonfix import loads_lenient

GENERATE_TASK = "documents.generate"
FORMATS = ("md", "html", "pptx", "pdf")
FORMATS_PROMPT = (
    "Decide which files to generate for the person's request. Allowed formats: md, html, pptx, pdf. "
    "Choose only formats the request calls for (slides/PPT → pptx, a printable handout or PDF → pdf, "
    'a web page → html, notes → md). Answer with JSON only: {"formats": ["pptx"]}, or {"formats": []} '
    "when the request asks for no file."
)


def normalize(formats: Iterable[Any]) -> tuple[str, ...]:
    """The known formats among ``formats``, lower-cased, each once, in tether's order."""
    given = {str(f).strip().lower().lstrip(".") for f in formats if isinstance(f, str)}
    return tuple(f for f in FORMATS if f in given)


def parse_formats(text: str) -> tuple[str, ...] | None:
    """Formats from a comma list a person typed (``pptx,pdf``); None when one is not allowed."""
    parts = [p.strip().lower().lstrip(".") for p in re.split(r"[,\s，、]+", text) if p.strip()]
    if any(p not in FORMATS for p in parts):
        return None
    return normalize(parts)


def answer_formats(text: str) -> tuple[str, ...]:
    """The formats in a model's answer to the follow-up: its JSON, else none."""
    decided = loads_lenient(text)
    if isinstance(decided, dict) and isinstance(decided.get("formats"), list):
        return normalize(decided["formats"])
    return ()


def follow_up(request: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": FORMATS_PROMPT},
        {"role": "user", "content": json.dumps({"request": request[:4000]}, ensure_ascii=False)},
    ]


def with_formats(arguments: dict[str, Any], formats: Sequence[str]) -> dict[str, Any]:
    return {**arguments, "formats": list(formats)}


def named(arguments: dict[str, Any]) -> tuple[str, ...]:
    raw = arguments.get("formats")
    return normalize(raw) if isinstance(raw, list) else normalize([raw]) if isinstance(raw, str) else ()


def ticked_note(formats: Sequence[str]) -> str:
    """What the model reads when the person ticked formats for this turn."""
    return (
        f"The person asked for these files: {', '.join(formats)}. When the content is ready, call "
        f"{GENERATE_TASK.replace('.', '__')} once; the formats are set for you."
    )
