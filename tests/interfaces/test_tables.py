"""Lists never cut what people copy: at any width an id, a task name or a status is printed whole on
one line, no line runs past the terminal, and numbers and CJK text line up by display width."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console

from tests.support.helpers import tether_cli
from tether.interfaces.tables import Column, print_table

COLUMNS = [
    Column(header="execution"),
    Column(header="task"),
    Column(header="status"),
    Column(header="turns", kind="number", drop=2),
    Column(header="started", drop=3),
    Column(header="message", kind="wrap", drop=1),
    Column(header="title", kind="clip", drop=4),
]
ROWS = [
    ["1a2472f00ac24cdd0e5", "documents.generate_presentation", "completed", "1", "17:09:52",
     "a long message that has to wrap somewhere " * 3, "一个很长的中文标题 with English"],
    ["1a2472efbb819dca8fb", "demo.salvage_relics", "rejected", "12", "12-01 17:09",
     "rarity: Field required; allowed: 2, 3, 4", "short"],
]  # fmt: skip


def rendered(width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    print_table(COLUMNS, ROWS, console=console)
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_ids_and_names_stay_whole_at_every_width() -> None:
    for width in range(32, 161, 7):  # (no id here is longer than 31)
        text = rendered(width)
        lines = text.splitlines()
        assert all(cell_len(line) <= width for line in lines), (width, text)
        for row in ROWS:
            for whole in row[:3]:
                assert any(whole in line for line in lines), (width, whole, text)


def test_numbers_are_right_aligned_and_cjk_lines_up() -> None:
    lines = rendered(200).splitlines()
    header = lines[0]
    first, second = (next(line for line in lines if line.startswith(row[0])) for row in ROWS)
    end = cell_len(header[: header.index("turns") + len("turns")])
    assert (
        cell_len(first[: first.index(" 1 ") + 2]) == end and cell_len(second[: second.index("12") + 2]) == end
    )
    column = cell_len(header[: header.index("title")])
    assert (
        cell_len(first[: first.index("一个")]) == column
        and cell_len(second[: second.index("short")]) == column
    )


def test_job_list_keeps_ids_whole_at_any_width(home: Path) -> None:
    ids = []
    for task in ("demo.start_game", "demo.daily_training", "demo.salvage_relics"):
        code, out, _ = tether_cli("task", "run", task, "--json", home=home)
        ids.append((json.loads(out)["execution_id"], task))
    for width in (40, 60, 80, 100):
        code, out, _ = tether_cli("job", "list", home=home, COLUMNS=str(width))
        lines = out.splitlines()
        assert code == 0 and all(cell_len(line) <= width for line in lines), (width, out)
        for execution_id, task in ids:
            assert any(execution_id in line for line in lines), (width, out)
            assert any(task in line for line in lines), (width, out)


def test_threads_count_turns_in_a_right_aligned_column(home: Path) -> None:
    code, out, _ = tether_cli("run", "开始游戏", "--json", home=home)
    assert code in (0, 1), out
    code, _, _ = tether_cli("threads", "rename", json.loads(out)["thread_id"], "第一个对话", home=home)
    assert code == 0
    code, out, _ = tether_cli("threads", home=home, COLUMNS="80")
    assert code == 0 and "turns" in out.splitlines()[0] and "1 turns" not in out, out
    assert "第一个对话" in out, out
