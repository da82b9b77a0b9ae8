"""Figures the fault-injection tests count as they run, printed at the end of the test session.

The audit reported "kills tried, homes left stuck, hostile inputs tried, tracebacks"; the tests that
inject those faults add to the same counters, so every run reports them again.
"""

from __future__ import annotations

from collections import Counter

FIGURES: Counter[str] = Counter()


def count(name: str, n: int = 1) -> None:
    FIGURES[name] += n
