"""Text from outside (a task's output and log, a file, a model's answer, a person's message replayed)
reaches the terminal with its control characters made visible: it can never retitle the window, clear
the screen, move the cursor or reverse the text around it.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.figures import count
from tests.support.helpers import ROOT, tether_cli
from tests.support.registry import HOSTILE
from tether.interfaces.render import visible

SUPPORT = ("--registry", "tests.support.registry:registry")
FORBIDDEN = ("\x1b", "\x07", "\x9b", "\u202e", "\r")


def _clean(text: str) -> bool:
    return not any(c in text for c in FORBIDDEN)


def test_visible_keeps_lines_and_shows_every_control_character() -> None:
    shown = visible("a\tb\nc" + HOSTILE + "\r\nend")
    assert _clean(shown)
    assert shown.startswith("a\tb\nc␛]0;pwned␇␛[2J") and shown.endswith("\nend")
    assert visible("普通的文字 plain text") == "普通的文字 plain text"


def test_commands_print_outside_text_with_its_controls_visible(home: Path) -> None:
    code, out, err = tether_cli(*SUPPORT, "task", "run", "t.hostile_text", home=home)
    assert code == 0, err
    assert _clean(out) and _clean(err) and "␛]0;pwned␇" in out
    execution_id = json.loads(tether_cli(*SUPPORT, "job", "list", "--json", home=home)[1])[0]["execution_id"]
    for args in (("job", "status", execution_id), ("job", "log", execution_id), ("job", "list")):
        code, out, err = tether_cli(*SUPPORT, *args, home=home)
        count("hostile inputs tried")
        assert code == 0 and _clean(out) and _clean(err), (args, out, err)
    # JSON stays JSON: the controls are escaped there, the document unchanged.
    code, out, _ = tether_cli(*SUPPORT, "job", "status", execution_id, "--json", home=home)
    assert json.loads(out)["message"] == f"message {HOSTILE}" and "\x1b" not in out


def test_a_conversation_replays_outside_text_with_its_controls_visible(home: Path) -> None:
    code, out, err = tether_cli("run", f"启动游戏 {HOSTILE}", home=home)
    assert _clean(out) and _clean(err), (out, err)
    thread = json.loads(tether_cli("threads", "--json", home=home)[1])[0]["thread_id"]
    code, out, err = tether_cli("trace", thread, home=home)
    count("hostile inputs tried")
    assert code == 0 and _clean(out) and _clean(err), (out, err)


@pytest.mark.skipif(sys.platform != "linux", reason="a pseudo-terminal")
def test_on_a_terminal_only_tethers_own_styles_reach_it(home: Path) -> None:
    """On a terminal Rich styles its output (SGR sequences, ESC [ … m): those are tether's own; nothing
    else may be there — no title (OSC), no screen clear, no cursor moves."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", *SUPPORT, "task", "run", "t.hostile_text"],
        stdin=secondary, stdout=secondary, stderr=secondary, cwd=ROOT,
        env={**os.environ, "TETHER_HOME": str(home), "TERM": "xterm-256color", "COLUMNS": "120"},
    )  # fmt: skip
    os.close(secondary)
    data = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    proc.wait(timeout=60)
    os.close(primary)
    text = data.decode("utf-8", errors="replace")
    assert "␛]0;pwned␇" in text
    assert "\x1b]" not in text and "\x07" not in text and "\x1b[2J" not in text and "\u202e" not in text
