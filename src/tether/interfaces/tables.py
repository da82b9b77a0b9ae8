"""Lists for people that fit the terminal without cutting what they copy.

An id, a task name, a status or a time is never split or shortened: people copy them. Only prose (a
message, a title) wraps or ends in "…". When the terminal is too narrow for every column, the least
useful ones are left out (``drop``, highest first); when even the ids do not fit side by side, each
row is printed as a small block of ``name: value`` lines instead of a table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from tether.interfaces.render import out

GAP = 2  # cells between two columns
PROSE_MIN = 12  # a prose column narrower than this reads as noise: drop a column instead


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    header: str
    # whole: never split (ids, names, times); number: whole and right-aligned; wrap: prose on
    # several lines; clip: prose on one line, ending in "…".
    kind: Literal["whole", "number", "wrap", "clip"] = "whole"
    drop: int = 0  # 0: always shown; otherwise left out first when the terminal is narrow (highest first)
    color: Callable[[str], str] | None = None  # a cell's style from its value (a status's colour)


def _natural(column: Column, cells: list[str]) -> int:
    return max([cell_len(column.header), *(cell_len(" ".join(c.split())) for c in cells)])


def _needed(columns: list[tuple[int, Column]], widths: list[int]) -> int:
    total = 0
    for index, column in columns:
        total += min(widths[index], PROSE_MIN) if column.kind in ("wrap", "clip") else widths[index]
    return total + GAP * (len(columns) - 1)


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[int] | None:
    """The indexes of the columns to show at ``width`` cells, or None when even those that are always
    shown do not fit side by side."""
    widths = [_natural(c, [str(r[i]) for r in rows]) for i, c in enumerate(columns)]
    shown = list(enumerate(columns))
    while _needed(shown, widths) > width:
        droppable = [pair for pair in shown if pair[1].drop]
        if not droppable:
            return None
        shown.remove(max(droppable, key=lambda pair: pair[1].drop))
    return [index for index, _ in shown]


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Each shown column's width: its natural width for what is kept whole, and the room that is left
    shared among the prose columns (none gets more than it needs)."""
    natural = [_natural(c, [r[i] for r in rows]) for i, c in enumerate(columns)]
    prose = [i for i, c in enumerate(columns) if c.kind in ("wrap", "clip")]
    left = width - GAP * (len(columns) - 1) - sum(w for i, w in enumerate(natural) if i not in prose)
    widths = list(natural)
    for position, index in enumerate(sorted(prose, key=lambda i: natural[i])):
        share = left // (len(prose) - position)
        widths[index] = max(1, min(natural[index], share))
        left -= widths[index]
    return widths


def print_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, console: Any = out) -> None:
    """Print ``rows`` (plain text, one string per column) under ``columns`` at the console's width."""
    width = console.width
    shown = fit(columns, rows, width)
    if shown is None:
        _print_blocks(columns, rows, console)
        return
    widths = _widths([columns[i] for i in shown], [[str(r[i]) for i in shown] for r in rows], width)
    table = Table(box=None, pad_edge=False, padding=(0, GAP // 2), show_edge=False, header_style="bold")
    for index, given in zip(shown, widths, strict=True):
        column = columns[index]
        table.add_column(
            column.header,
            width=given,  # every width is set: Rich never has to shrink a column (it would cut an id)
            no_wrap=column.kind != "wrap",
            overflow="fold" if column.kind == "wrap" else "ellipsis",
            justify="right" if column.kind == "number" else "left",
        )
    for row in rows:
        table.add_row(*(_cell(columns[i], str(row[i])) for i in shown))
    console.print(table)


def _cell(column: Column, value: str) -> Text:
    return Text(" ".join(value.split()), style=column.color(value) if column.color else "")


def _print_blocks(columns: Sequence[Column], rows: Sequence[Sequence[str]], console: Any) -> None:
    """Each row as ``name: value`` lines; a value kept whole that does not fit beside its name goes on
    a line of its own."""
    label = max(cell_len(c.header) for c in columns) + 1
    for number, row in enumerate(rows):
        if number:
            console.print()
        block = Table.grid(padding=(0, 1))
        block.add_column(no_wrap=True, style="dim", width=label)
        block.add_column(overflow="fold")  # a hanging indent: prose wraps under itself
        for column, cell in zip(columns, row, strict=True):
            value = _cell(column, str(cell))
            if not value.plain:
                continue
            if column.kind in ("wrap", "clip") or label + 1 + value.cell_len <= console.width:
                block.add_row(f"{column.header}:", value)
                continue
            console.print(block)
            console.print(Text(f"{column.header}:", style="dim"))
            console.print(value, overflow="fold")
            block = Table.grid(padding=(0, 1))
            block.add_column(no_wrap=True, style="dim", width=label)
            block.add_column(overflow="fold")
        console.print(block)
