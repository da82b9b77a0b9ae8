"""The decider (``agent/decider.py``): how often it is right about speaking first, and what a decision
costs.

Quality, on the labelled set ``bench/data/signals.json`` (160 signals in Chinese and English — outside
news, messages, ended work, changed files, schedule ticks — each labelled fire / no fire by whether a
person who lets an assistant speak first would want to be interrupted, with hard cases: negations,
recoveries that name the outage, promotions that sound urgent, cancelled long work; two sets by two
authors who never saw the rules: ``tune`` (100, whose misses the rules were widened on) and ``held``
(60, never used to change them)): precision and recall of "fire" for the rules alone at the default
threshold, per half and language, and the tune half's misses. Precision matters more: a false alarm is
spam, a missed one is a message the person reads later anyway.

Cost: one decision by the rules, next to the floor of one compiled regular expression search over the
same text (what the cheapest rule costs), paired and interleaved.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from bench.paired import paired, row
from tether.agent.decider import Signal, decide

DATA = Path(__file__).with_name("data") / "signals.json"
THRESHOLD = 0.5
ROUNDS = 400
WARMUP = 20


def load() -> list[dict[str, Any]]:
    return json.loads(DATA.read_text(encoding="utf-8"))["signals"]


def _signal(item: dict[str, Any]) -> Signal:
    return Signal(
        kind=item["kind"], text=item.get("text", ""), source=item.get("source", ""), data=item.get("data", {})
    )


def judged(items: list[dict[str, Any]]) -> list[tuple[dict[str, Any], bool]]:
    """Each labelled signal with what the rules decided (fire or not)."""

    async def run() -> list[bool]:
        return [(await decide(_signal(item), threshold=THRESHOLD)).fire for item in items]

    return list(zip(items, asyncio.run(run()), strict=True))


def scores(pairs: list[tuple[dict[str, Any], bool]]) -> tuple[float, float, float, int]:
    """(precision, recall, accuracy, n) of "fire"."""
    tp = sum(1 for item, fired in pairs if fired and item["fire"])
    fp = sum(1 for item, fired in pairs if fired and not item["fire"])
    fn = sum(1 for item, fired in pairs if not fired and item["fire"])
    right = sum(1 for item, fired in pairs if fired == item["fire"])
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    return precision, recall, right / len(pairs) if pairs else 0.0, len(pairs)


def decider(home: Path) -> None:
    if DATA.exists():
        pairs = judged(load())
        print(f"\ndecider: {len(pairs)} labelled signals (precision, recall of fire) at {THRESHOLD}")
        for split in ("tune", "held"):
            for group in ("all", "zh", "en"):
                chosen = [p for p in pairs if p[0]["split"] == split and group in ("all", p[0]["lang"])]
                precision, recall, accuracy, n = scores(chosen)
                shown = f"precision {precision:.2f}  recall {recall:.2f}  accuracy {accuracy:.2f}"
                print(f"  rules, {split} {group:<3} ({n:>3}): {shown}")
        for item, fired in pairs:  # the tune half's misses only: the held half is never looked into
            if item["split"] == "tune" and fired != item["fire"]:
                said = "fired" if fired else "silent"
                labelled = "fire" if item["fire"] else "silent"
                what = item.get("text") or json.dumps(item.get("data", {}), ensure_ascii=False)
                print(f"    tune: {said:<6} but labelled {labelled}: [{item['kind']}] {what[:90]}")
    else:
        print("\ndecider: the labelled set bench/data/signals.json is missing: quality not measured")
    text = "the nightly backup failed: disk full on /data (evidence: 0 bytes free)"
    signal = Signal(kind="outside", text=text, source="backup.sh")
    pattern = re.compile(r"fail(ed|ure)?|error|紧急|失败")
    pair = paired(
        lambda: asyncio.run(decide(signal, threshold=THRESHOLD)),
        lambda: asyncio.run(_floor(pattern, text)),
        ROUNDS,
        WARMUP,
    )
    row("one decision by the rules", pair, "one regular expression search, in the same event-loop call")


async def _floor(pattern: re.Pattern[str], text: str) -> bool:
    return pattern.search(text) is not None
