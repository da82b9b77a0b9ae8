"""`tether job prune`: a limit given on the command line means what it says (0 keeps none); only the
settings read 0 as "keep forever"."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.helpers import tether_cli


def test_keep_zero_removes_every_ended_job_and_the_help_says_so(home: Path) -> None:
    for task in ("demo.start_game", "demo.daily_training", "demo.exit_game"):
        assert tether_cli("task", "run", task, home=home)[0] in (0, 1)
    code, out, _ = tether_cli("job", "prune", "--keep", "1", "--dry-run", "--json", home=home)
    assert code == 0 and json.loads(out)["executions"] == 2, out
    code, out, _ = tether_cli("job", "prune", "--keep", "0", "--json", home=home)
    assert code == 0 and json.loads(out)["executions"] == 3, out
    code, out, _ = tether_cli("job", "list", "--json", home=home)
    assert code == 0 and json.loads(out) == []
    code, out, _ = tether_cli("job", "prune", "--help", home=home, COLUMNS="200")
    assert "(0: keep none)" in out and "0 means no count limit" in out, out


def test_settings_zero_still_keeps_everything(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.toml").write_text("[store]\nkeep_days = 0\nkeep_executions = 0\n")
    assert tether_cli("task", "run", "demo.start_game", home=home)[0] == 0
    code, out, _ = tether_cli("job", "prune", "--json", home=home)
    assert code == 0 and json.loads(out)["executions"] == 0, out
