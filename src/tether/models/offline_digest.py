"""What the offline model writes above researched pages and over a folder of notes: an overview that
says what the sources say (never their titles run together) and a title taken from the notes.

Extractive and deterministic: the overview is the few points, across all the page summaries, that
the other sources agree with most (their terms recur elsewhere), each cited, in source order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

OVERVIEW_POINTS = 3
MIN_POINT_CHARS = 12  # shorter points are headings or fragments, not statements
TITLE_CHARS = 120

_LATIN = re.compile(r"[a-z0-9]{3,}")
_HAN = re.compile(r"[\u4e00-\u9fff]+")


def terms(text: str) -> set[str]:
    """Latin words of three letters or more, and Chinese character pairs."""
    lowered = text.lower()
    found = set(_LATIN.findall(lowered))
    for run in _HAN.findall(lowered):
        found.update(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return found


def _plain(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.lower())


def overview(sources: Sequence[tuple[str, Sequence[str]]], topic: str = "") -> list[str]:
    """The overview's points, ``"point [n]"``: from ``sources`` (each a page title and the points of its
    summary), the points whose terms the other sources share most, at most one per source first, in
    source order. Points that only repeat a page's title are never chosen."""
    candidates: list[tuple[int, int, str, set[str]]] = []  # (source n, position, point, terms)
    for n, (title, points) in enumerate(sources, start=1):
        named = _plain(title)
        for position, point in enumerate(points):
            if len(point) < MIN_POINT_CHARS or (named and _plain(point) in named):
                continue  # a fragment, or the page's title (or part of it) again
            candidates.append((n, position, point, terms(point)))
    if not candidates:
        return []
    by_source: dict[int, set[str]] = {}
    for n, _, _, found in candidates:
        by_source.setdefault(n, set()).update(found)
    spread = Counter(t for found in by_source.values() for t in found)
    wanted = terms(topic)

    def score(candidate: tuple[int, int, str, set[str]]) -> float:
        _, position, _, found = candidate
        shared = sum(spread[t] - 1 for t in found)  # how many other sources speak of the same things
        return (shared + 2 * len(found & wanted)) / (1 + len(found)) ** 0.5 - 0.01 * position

    ranked = sorted(candidates, key=lambda c: (-score(c), c[0], c[1]))
    chosen: list[tuple[int, int, str, set[str]]] = []
    for candidate in ranked:  # one point per source before a second from any
        if all(c[0] != candidate[0] for c in chosen):
            chosen.append(candidate)
        if len(chosen) == OVERVIEW_POINTS:
            break
    for candidate in ranked:
        if len(chosen) >= OVERVIEW_POINTS:
            break
        if candidate not in chosen:
            chosen.append(candidate)
    return [f"{point} [{n}]" for n, _, point, _ in sorted(chosen, key=lambda c: (c[0], c[1]))]


def title_of_notes(headings: Sequence[str], fallback: str) -> str:
    """A deck's title from the headings of the notes it gathers: the one heading, or the first few
    joined; ``fallback`` (the folder's name) only when no note has a heading."""
    named = [" ".join(h.split()) for h in headings if h.strip()]
    if not named:
        return fallback
    title = named[0] if len(named) == 1 else " · ".join(named[:3]) + (" …" if len(named) > 3 else "")
    return title[:TITLE_CHARS]
