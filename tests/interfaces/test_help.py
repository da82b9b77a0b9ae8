"""Every command's ``--help`` reads as prose for a person: no Python type tags, no line broken before
the terminal's edge, at any width."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from tests.support.helpers import ROOT, tether_cli
from tether.interfaces.cli import app
from tether.interfaces.guard import command_of

TYPE_TAG = re.compile(r"<(?:[a-z]+(?: range)?|list\[[^\]]*\]|[a-z]+\|[a-z|]+)>")
SEPARATOR = "=====help-of "

# One process renders every command's help, as `tether … --help` does (the same guard, the same
# app), so that walking ~50 commands at two widths costs two interpreter starts, not a hundred.
DRIVER = f"""
import json, sys
from tether.interfaces import guard
from tether.interfaces.cli import app
for line in sys.stdin:
    print({SEPARATOR!r} + line.strip(), flush=True)
    guard.run(app, json.loads(line) + ["--help"])
    sys.stdout.flush()
"""


def command_paths() -> list[list[str]]:
    found: list[list[str]] = [[]]

    def walk(command: object, path: list[str]) -> None:
        for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
            if not getattr(sub, "hidden", False):
                found.append([*path, name])
                walk(sub, [*path, name])

    walk(command_of(app), [])
    return found


def premature_breaks(text: str, width: int) -> list[str]:
    """Lines that end where the next line's first word would still have fitted: a hard line break
    in the help text, not a wrap."""
    found = []
    lines = text.splitlines()
    for above, below in itertools.pairwise(lines):
        boxed = above.startswith("│") and below.startswith("│")
        a, b = (above[1:-1], below[1:-1]) if boxed else (above, below)
        limit = cell_len(a) - 1 if boxed else width - 1
        words = b.split()
        indent = len(b) - len(b.lstrip())
        # In a panel, a line that starts where the one above does (after a required `*`) is a new row.
        starts = len(a) - len(a.lstrip(" *")) if boxed else 0
        if not words or indent <= starts or not a.strip() or indent >= len(a) or words[0].startswith("["):
            continue  # ([default: …], [required] are set apart by the renderer)
        if a[indent - 1] != " " or a[indent] == " ":  # the line below does not continue this column
            continue
        room = limit - cell_len(a.rstrip()) - 1
        if cell_len(words[0]) <= room:
            found.append(f"{above!r} / {below!r}")
    return found


@pytest.mark.parametrize("width", [80, 120])
def test_every_help_has_no_type_tags_and_no_early_line_breaks(tmp_path: Path, width: int) -> None:
    paths = command_paths()
    assert len(paths) > 30  # the walk found the command tree
    shown = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input="".join(json.dumps(p) + "\n" for p in paths),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TETHER_HOME": str(tmp_path), "COLUMNS": str(width), "TETHER_CLI_SERVER": "0"},
        cwd=ROOT,
    )
    assert shown.returncode == 0, shown.stderr
    pages = shown.stdout.split(SEPARATOR)[1:]
    assert len(pages) == len(paths)
    problems = []
    for page in pages:
        name, _, body = page.partition("\n")
        assert "Usage: tether" in body, (name, body)
        problems += [f"{name}: type tag {tag}" for tag in TYPE_TAG.findall(body)]
        problems += [f"{name}: broken early {line}" for line in premature_breaks(body, width)]
        problems += [f"{name}: too wide {line!r}" for line in body.splitlines() if cell_len(line) > width]
    assert not problems, "\n".join(problems)


def test_help_names_values_plainly_and_keeps_bracketed_words(home: Path) -> None:
    code, out, _ = tether_cli("run", "--help", home=home, COLUMNS="100")
    assert code == 0 and "[GOAL]" in out and "[workspace]" in out, out
    assert re.search(r"--thread\s+TEXT", out) and re.search(r"--confirm\s+With", out), out
    code, out, _ = tether_cli("job", "status", "--help", home=home, COLUMNS="100")
    assert code == 0 and "tether job status [OPTIONS] EXECUTION_ID" in out, out


def test_the_break_finder_sees_a_hard_break() -> None:
    page = " A sentence that stops\n here although the line had room.\n"
    assert premature_breaks(page, 80)
    assert not premature_breaks(" " + "word " * 15 + "\n continues.\n", 80)


def test_registry_help_names_the_registry_used_when_none_is_given(home: Path) -> None:
    from tether.interfaces.base import DEFAULT_REGISTRY

    code, out, _ = tether_cli("--help", home=home, COLUMNS="200")
    assert code == 0 and DEFAULT_REGISTRY in out and "or the demo" not in out, out


def test_a_bare_group_shows_its_commands_and_a_default_is_said_once(home: Path) -> None:
    _, out, err = tether_cli("initiative", home=home, COLUMNS="100")
    assert "Missing command" not in out + err and "Commands" in out, out + err
    code, out, _ = tether_cli("signal", "--help", home=home, COLUMNS="200")
    assert code == 0
    assert "(default: the assistant)" in out and "[default: assistant]" not in out, out
