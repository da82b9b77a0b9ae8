"""The labelled request table (``bench/data/offline_requests.json``): the tune half stays at its level,
and no half ever runs something destructive it did not ask for. The held half's figure is printed by
``python -m bench offline``, never asserted high: it is the measure of requests the rules never saw."""

from __future__ import annotations

from bench.offline import figures, outcomes

# Handled rows of the tune half when this was last raised (a floor, not a goal: raise it as it rises).
TUNE_FLOOR = {"zh": 32, "en": 29}


def test_the_tune_half_stays_at_its_level() -> None:
    results = outcomes("tune")
    table = figures(results)
    misses = [f"{r.row['text']}: {r.why}" for r in results if not r.handled]
    for lang, floor in TUNE_FLOOR.items():
        assert table[("tune", lang)][0] >= floor, "\n".join(misses)


def test_nothing_destructive_runs_unasked_in_either_half() -> None:
    results = outcomes()
    assert not [r.row["text"] for r in results if r.destructive_unasked]
    assert {r.row["half"] for r in results} == {"tune", "held"}
