"""The tether home is private to its owner: every folder 0700, every file 0600."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.helpers import tether_cli


def test_everything_tether_writes_in_the_home_is_owner_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    old = os.umask(0o022)  # a permissive umask: the modes must not depend on it
    try:
        for args in (
            ["task", "run", "demo.start_game"],
            [
                "task",
                "run",
                "demo.farm_instance",
                "-p",
                "instance_type=拟造花萼（金）",
                "-p",
                "instance_name=藏珍之蕾",
            ],
            ["task", "run", "demo.loop_farm", "-p", "rounds=1"],
            ["run", "查看游戏状态", "--thread", "th-1"],
            ["task", "run", "demo.debug_crash"],
            ["task", "run", "demo.exit_game"],
        ):
            tether_cli(*args, home=home)
    finally:
        os.umask(old)
    exposed = [
        f"{oct(path.stat().st_mode & 0o777)} {path.relative_to(home)}"
        for path in [home, *home.rglob("*")]
        if path.stat().st_mode & 0o077
    ]
    assert exposed == []
    assert any(home.rglob("result.json")) and (home / "tether.db").exists()
